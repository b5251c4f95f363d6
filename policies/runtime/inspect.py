"""A deployment contract, readable: what an integrator checks before starting a policy on a robot.

``robot-rl inspect <policy.onnx | run folder>`` prints :func:`describe` of the contract in the file: the observation
layout (index ranges, units, scales, history order), the action mapping, the actuators, the airframe facts of
multirotor policies (motor order, positions, spin directions, thrust model) and the rest of the task facts.
"""

from __future__ import annotations

import json
from typing import Any

from policies.runtime.contract import Contract
from policies.runtime.text import printable


def describe(c: Contract) -> str:
    """Multi-line text describing ``c``; text from the file is shown with its control characters escaped
    (:func:`policies.runtime.text.printable`), so a contract cannot drive the terminal it is printed on."""
    lines = [
        f"task {c.task}  (contract v{c.version}, control period {c.control_period_s * 1e3:g} ms = "
        f"{1.0 / c.control_period_s:g} Hz, normalisation {c.normalization})",
        "",
        f"observation '{c.input_name}' [B, {c.obs_dim}], terms in order (histories newest first):",
    ]
    start = 0
    for t in c.observation:
        span = f"[{start}:{start + t.dim}]"
        hist = f" x {t.history} steps" if t.history > 1 else ""
        scale = f", scale {t.scale:g}" if t.scale != 1.0 else ""
        if t.integral_limit > 0:
            band = f", only while within +-{t.integral_band:g} {t.unit}".rstrip() if t.integral_band > 0 else ""
            src = f"integral of signal '{t.source}' (dt = control period, clipped to +-{t.integral_limit:g}{band})"
            unit = f"{t.unit} s" if t.unit else "s"
        else:
            src, unit = f"signal '{t.source}'", t.unit
        lines.append(f"  {span:<10} {t.name:<20} {t.size}{hist}  <- {src} {unit}{scale}".rstrip())
        start += t.dim
    a = c.action
    ref = f" + {a.reference}" if a.reference else ""
    if c.chunk is not None:
        ch = c.chunk
        spread = "standard normal" if ch.noise_scale == 1.0 else f"normal, standard deviation {ch.noise_scale:g}"
        spread = "zeros: a deterministic plan" if ch.noise_scale == 0.0 else spread
        noise = f" and '{ch.noise_input}' [B, {ch.pred_horizon}, {a.size}] ({spread})" if ch.noise_input else ""
        if ch.ensemble_decay is None:
            execute = f"execute {ch.action_horizon}, one per control period, then plan again"
        else:
            m = ch.ensemble_decay
            favour = "older" if m > 0 else "newer" if m < 0 else "no"
            execute = (
                f"plan every control period and execute the average of every still-valid plan's action, each older "
                f"plan weighted exp({m:g}) x the next newer ({favour} plans favoured; temporal ensembling)"
            )
        lines += [
            "",
            f"chunk: the graph takes the last {ch.obs_horizon} observations '{c.input_name}' [B, {ch.obs_horizon}, "
            f"{c.obs_dim}] (oldest first){noise}",
            f"  and returns '{c.output_name}' [B, {ch.pred_horizon}, {a.size}] normalised actions; {execute}",
            f"  sampler: {_fmt(ch.sampler) if ch.sampler else '(deterministic)'}",
            "  each executed action maps to a command by the action section below, at the step it is applied",
        ]
        for name, cam in ch.cameras.items():
            h, w, _ = ch.image_shape(name)
            lines.append(
                f"  camera '{name}': input '{cam['input']}' uint8 [B, {ch.obs_horizon}, {h}, {w}, 3] RGB, the same "
                "steps as the observations"
            )
            if cam.get("mount"):
                lines.append(f"    mounted: {_fmt(cam['mount'])}")
        if ch.language:
            lang, enc = ch.language, ch.language["encoder"]
            known = list(lang["instructions"])
            shown = ", ".join(f"'{printable(t)}'" for t in known[:4]) + (", ..." if len(known) > 4 else "")
            tokens = int(lang.get("tokens", 0))
            what = f"{tokens} token rows of {lang['dim'] // tokens}" if tokens else "the embedding of the instruction"
            lines += [
                f"  instruction: input '{lang['input']}' float [B, {lang['dim']}], {what} by "
                f"{printable(enc['name'])} (sha256 {printable(enc['sha256'][:12])}...)",
                f"    {len(known)} instructions known (embedded in the contract): {shown}",
            ]
            if "subspace" in lang:
                lines.append(
                    f"    read within the {lang['subspace']}-dimensional span of its training instructions' "
                    "embeddings: another text is read as the nearest mix of them"
                )
            if "nearest" in lang:
                lines.append(f"    read as the nearest of its {lang['nearest']} training instructions (retrieval)")
    lines += [
        "",
        f"action '{c.output_name}' [B, {a.size}], kind {a.kind} ({a.unit}): "
        f"command = clip(offset{ref} + scale * clip(a, -1, 1), low, high)",
    ]
    if a.reference:
        count = c.reference_slice()[1]
        lines.append(f"  relative: the newest '{a.reference}' sample is added to commands 0..{count - 1}")
    for i, name in enumerate(a.names):
        lines.append(
            f"  {i}  {name:<20} offset {a.offset[i]:<10.6g} scale {a.scale[i]:<10.6g} "
            f"range [{a.low[i]:.6g}, {a.high[i]:.6g}]"
        )
    start_cmd = f"the offset + {a.reference}" if a.reference else "the offset"
    lines.append(f"  start with last_action = 0 (the command at a = 0 is {start_cmd})")
    if c.joint_names and c.joint_names != list(a.names):
        lines += ["", f"joints: {', '.join(c.joint_names)}"]
    if c.default_pose:
        lines.append(f"default pose: {c.default_pose}")
    extra = dict(c.extra)
    airframe = extra.pop("airframe", None)
    if isinstance(airframe, dict):
        lines += ["", "airframe:", *_airframe(airframe)]
    ranges = extra.pop("training_ranges", None)
    if isinstance(ranges, dict) and ranges:
        lines += ["", "trained under randomisation (smallest .. largest value of each parameter):"]
        for k, r in ranges.items():
            if isinstance(r, dict):
                lines.append(f"  {k:<26} {_fmt(r.get('low'))} .. {_fmt(r.get('high'))} {r.get('unit', '')}".rstrip())
    lines += ["", f"filter: {json.dumps(c.filter) if c.filter else '(none)'}"]
    for k, v in extra.items():
        lines.append(f"{k}: {_fmt(v)}")
    return "\n".join(printable(line) for line in lines)


AIRFRAME_ROTOR_KEYS = ("motor_order", "rotor_positions_m", "spin_seen_from_above", "reaction_torque_sign_z")


def _airframe(airframe: dict[str, Any]) -> list[str]:
    """The airframe section, one line per rotor (when its per-rotor lists agree) and per other fact."""
    lines = []
    order = airframe.get("motor_order", [])
    pos, spin, sign = (airframe.get(k) for k in AIRFRAME_ROTOR_KEYS[1:])
    shown: tuple[str, ...] = ()  # malformed or partial: every fact as it is
    if isinstance(order, list) and all(isinstance(v, list) and len(v) == len(order) for v in (pos, spin, sign)):
        assert isinstance(pos, list) and isinstance(spin, list) and isinstance(sign, list)
        for i, name in enumerate(order):
            torque = f"{sign[i]:+g}" if isinstance(sign[i], int | float) else _fmt(sign[i])
            lines.append(
                f"  {name!s:<16} at {_fmt(pos[i])} m, spins {spin[i]} seen from above (reaction torque {torque} z)"
            )
        shown = AIRFRAME_ROTOR_KEYS
    for k, v in airframe.items():
        if k not in shown:
            if isinstance(v, dict):
                lines.append(f"  {k}:")
                lines += [f"    {kk}: {_fmt(vv)}" for kk, vv in v.items()]
            else:
                lines.append(f"  {k}: {_fmt(v)}")
    return lines


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_fmt(x)}" for k, x in v.items()) + "}"
    return str(v)
