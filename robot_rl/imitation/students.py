"""Student kinds: one typed config class per kind, registered by name (LeRobot's pattern), each building its network.

``policy.kind`` in a ``train-bc`` config picks the class (:data:`STUDENTS`); the class owns its settings, checks them,
and builds its :class:`~policies.nets.chunk.ChunkPolicy`. Adding a student kind is a network in ``policies/nets``, a
config class here with :func:`register_student`, and a ``configs/bc-<kind>.yaml``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal

from policies.nets.chunk import ChunkPolicy, Horizons
from policies.nets.language import DIM as LANGUAGE_DIM
from policies.nets.language import MAX_TOKENS
from policies.runtime.contract import ChunkSpec
from sim.typed_config import ConfigError, from_dict

Ranges = tuple[Any, Any, Any, Any]
"""Min-max statistics ``(obs_min, obs_max, action_min, action_max)`` of the demonstrations."""


@dataclass
class StudentConfig:
    """What every student kind has: the horizons and how chunks are executed, and the cameras it sees.

    Attributes:
        kind: The registered kind (:data:`STUDENTS`).
        obs_horizon: Observations per query ``To`` (Chi et al.: 2).
        pred_horizon: Actions per query ``Tp`` (Chi et al.: 16).
        action_horizon: Actions executed before re-planning ``Ta`` (Chi et al.: 8).
        ensemble_decay: Temporal ensembling at run time: plan every step and average the plans, each older plan
            weighted ``exp(m)`` times the next newer (``m > 0``: older plans count more, ACT; ``m < 0``: newer
            ones; ``null``: receding horizon only).
        noise_scale: Students that sample (a noise input): standard deviation of the initial noise each plan starts
            from at run time. 1 samples the distribution the student learned; 0 starts every plan from zeros, so
            the same inputs give the same plan (a deterministic policy: the sampler's path from the centre of its
            noise); in between, lower-temperature sampling. Training is unaffected.
        cameras: Dataset cameras (``observation.images.<camera>``) the student also sees, e.g. ``[wrist]``; each
            gets an image encoder (:class:`~policies.nets.vision.ImageEncoder`). Empty: observations only.
        image_features: Features per camera.
        image_shift: Random-shift augmentation of training images, pixels (0: none).
        language: Condition on the episode's instruction (the dataset's task text, embedded by the frozen sentence
            encoder of :mod:`policies.nets.language`): a language-conditioned student.
        language_subspace: Read the instruction's pooled embedding projected onto the affine span of the training
            instructions' embeddings (:mod:`policies.nets.instruction_subspace`: a paraphrase never trained on is
            read as the nearest mix of the trained texts instead of as an input unlike any seen); false: as it is.
            Token rows (``language_tokens``) are not projected.
        language_nearest: With ``language_subspace``, read every instruction as the training instruction nearest to
            it (retrieval: the student only reads texts it trained on; a paraphrase the encoder places nearest
            another task's text does that task). ``configs/bc-vla.yaml`` sets it: on both suites and every held-out
            list measured it did as well as the projection or better (docs/vla.md). Without language: no effect.
        image_film: Condition each camera's image encoder on the instruction (FiLM, as RT-1), so that what the
            encoder picks out of the image can depend on what the instruction names; needs ``language``, a camera
            and the pooled instruction. Off by default (docs/vla.md, "Measured").
    """

    kind: str = ""
    obs_horizon: int = 2
    pred_horizon: int = 16
    action_horizon: int = 8
    ensemble_decay: float | None = None
    noise_scale: float = 1.0
    cameras: list[str] = field(default_factory=list)
    image_features: int = 64
    image_shift: int = 4
    language: bool = False
    language_subspace: bool = True
    language_nearest: bool = False
    image_film: bool = False

    noise_input: ClassVar[str] = ""
    """The exported graph's noise input (``""``: a deterministic graph)."""

    def __post_init__(self) -> None:
        if min(self.obs_horizon, self.pred_horizon, self.action_horizon) < 1:
            raise ValueError("policy horizons must be >= 1")
        if self.action_horizon > self.pred_horizon:
            raise ValueError(f"policy.action_horizon {self.action_horizon} exceeds pred_horizon {self.pred_horizon}")
        if self.ensemble_decay is not None and not math.isfinite(self.ensemble_decay):
            raise ValueError(f"policy.ensemble_decay must be a finite number, got {self.ensemble_decay}")
        if not 0.0 <= self.noise_scale <= 1.0:  # NaN fails too
            raise ValueError(f"policy.noise_scale must be in [0, 1], got {self.noise_scale}")
        if self.noise_scale != 1.0 and not self.noise_input:
            raise ValueError(f"policy.noise_scale: a '{self.kind}' student draws no noise; leave it at 1")
        if self.language and self.language_nearest and not self.language_subspace:
            raise ValueError(
                "policy.language_nearest needs policy.language_subspace (set policy.language_nearest=false to read "
                "the raw embedding)"
            )
        if self.image_film and not (self.language and self.cameras):
            raise ValueError("policy.image_film conditions the image encoders on the instruction: it needs "
                             "policy.language and policy.cameras")  # fmt: skip
        if len(set(self.cameras)) != len(self.cameras):
            raise ValueError(f"policy.cameras names a camera twice: {self.cameras}")
        if self.image_features < 1 or self.image_shift < 0:
            raise ValueError("policy.image_features must be >= 1 and policy.image_shift >= 0")

    @classmethod
    def from_plain(cls, data: Any, path: str = "policy") -> StudentConfig:
        """The config of the kind ``data`` names (see :func:`student_config`)."""
        return student_config(data, path)

    @property
    def horizons(self) -> Horizons:
        """``(To, Tp, Ta)``."""
        return Horizons(self.obs_horizon, self.pred_horizon, self.action_horizon)

    def build(self, obs_dim: int, action_dim: int, ranges: Ranges, vision: dict[str, Any]) -> ChunkPolicy:
        """The network: ``ranges`` are the min-max statistics ``(obs_min, obs_max, action_min, action_max)``,
        ``vision`` the image-encoder settings (``cameras`` name -> size, ``image_features``, ``image_shift``)."""
        raise NotImplementedError(f"student kind '{self.kind}' builds no network")

    def chunk_spec(
        self,
        policy: ChunkPolicy,
        mounts: dict[str, dict[str, Any]] | None = None,
        language: dict[str, Any] | None = None,
    ) -> ChunkSpec:
        """The contract's ``chunk`` section of a trained student (``mounts``: the dataset's camera mounts;
        ``language``: a language-conditioned student's ``chunk.language``)."""
        h = policy.horizons
        cameras = {
            c: {"input": name, "height": hw[0], "width": hw[1], "mount": dict((mounts or {}).get(c, {}))}
            for (c, hw), name in zip(policy.cameras.items(), policy.image_inputs(1), strict=True)
        }
        return ChunkSpec(
            h.obs, h.pred, h.action, self.noise_input, policy.sampler_settings(), self.ensemble_decay, cameras,
            dict(language or {}), dict(policy.guide_inputs), self.noise_scale,
        )  # fmt: skip


STUDENTS: dict[str, type[StudentConfig]] = {}
"""Student kinds by name."""


def register_student(cls: type[StudentConfig]) -> type[StudentConfig]:
    """Class decorator: register a student config class under its ``kind`` default."""
    kind = cls().kind
    if kind in STUDENTS:
        raise ValueError(f"student kind '{kind}' is registered twice")
    STUDENTS[kind] = cls
    return cls


@register_student
@dataclass
class MLPStudentConfig(StudentConfig):
    """Plain behaviour cloning: an MLP regresses the action chunk from the observation window.

    Attributes:
        mlp_hidden: Hidden sizes.
    """

    kind: str = "mlp"
    mlp_hidden: list[int] = field(default_factory=lambda: [256, 256, 256])

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.mlp_hidden or min(self.mlp_hidden) < 1:
            raise ValueError("policy.mlp_hidden must be a non-empty list of sizes >= 1")

    def build(self, obs_dim: int, action_dim: int, ranges: Ranges, vision: dict[str, Any]) -> ChunkPolicy:
        """:class:`~policies.nets.bc_mlp.MLPChunkPolicy`."""
        from policies.nets.bc_mlp import MLPChunkPolicy

        o_lo, o_hi, a_lo, a_hi = ranges
        return MLPChunkPolicy(
            obs_dim, action_dim, self.horizons, o_lo, o_hi, a_lo, a_hi, hidden=self.mlp_hidden, **vision
        )


@register_student
@dataclass
class DiffusionStudentConfig(StudentConfig):
    """A diffusion policy: DDPM-trained, DDIM-sampled action chunks (Chi et al.).

    Attributes:
        denoiser: ``unet`` (1D U-Net with FiLM) or ``transformer``.
        down_dims: U-Net channels per level.
        d_model: Transformer token width.
        heads: Transformer attention heads.
        layers: Transformer blocks.
        train_steps: DDPM diffusion steps.
        inference_steps: DDIM steps per chunk (evaluation and export).
        beta_schedule: Noise schedule (``diffusers`` name).
        clip_sample: Clip the predicted clean sample to ``[-1, 1]`` in every denoising step.
    """

    kind: str = "diffusion"
    denoiser: Literal["unet", "transformer"] = "unet"
    down_dims: list[int] = field(default_factory=lambda: [32, 64, 128])
    d_model: int = 64
    heads: int = 4
    layers: int = 3
    train_steps: int = 100
    inference_steps: int = 10
    beta_schedule: Literal["squaredcos_cap_v2", "linear", "scaled_linear"] = "squaredcos_cap_v2"
    clip_sample: bool = True

    noise_input: ClassVar[str] = "noise"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.inference_steps <= self.train_steps:
            raise ValueError("policy.inference_steps must be in [1, train_steps]")
        if not self.down_dims or min(self.down_dims) < 1:
            raise ValueError("policy.down_dims must be a non-empty list of sizes >= 1")

    def build(self, obs_dim: int, action_dim: int, ranges: Ranges, vision: dict[str, Any]) -> ChunkPolicy:
        """:class:`~policies.nets.diffusion.DiffusionPolicy` with its sampler."""
        from policies.nets.diffusion import DiffusionPolicy, SamplerSettings

        sampler = SamplerSettings(self.train_steps, self.inference_steps, self.beta_schedule, self.clip_sample)
        o_lo, o_hi, a_lo, a_hi = ranges
        return DiffusionPolicy(
            obs_dim, action_dim, self.horizons, o_lo, o_hi, a_lo, a_hi, denoiser=self.denoiser,
            down_dims=tuple(self.down_dims),
            d_model=self.d_model, heads=self.heads, layers=self.layers, sampler=sampler, **vision,
        )  # fmt: skip


@register_student
@dataclass
class VLAStudentConfig(StudentConfig):
    """A vision-language-action policy: image, instruction and state tokens fused by a transformer, action chunks
    from a flow-matching action expert (:class:`~policies.nets.vla.VLAPolicy`).

    Attributes:
        d_model: Token width.
        heads: Attention heads.
        layers: Fusion blocks over the prefix (state, image and instruction tokens).
        expert_layers: Action-expert blocks.
        flow_steps: Euler steps per chunk (evaluation and export).
        language_tokens: Attend over the instruction encoder's per-token outputs, at most this many tokens (Octo's
            token-level conditioning; a longer instruction is refused by name); 0: one token of the pooled
            sentence embedding.
    """

    kind: str = "vla"
    language: bool = True
    d_model: int = 128
    heads: int = 4
    layers: int = 3
    expert_layers: int = 3
    flow_steps: int = 10
    language_tokens: int = 0

    noise_input: ClassVar[str] = "noise"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.language_tokens <= MAX_TOKENS:
            raise ValueError(f"policy.language_tokens must be in [0, {MAX_TOKENS}], got {self.language_tokens}")
        if self.language_tokens and not self.language:
            raise ValueError("policy.language_tokens needs policy.language: true")
        if self.language_tokens and self.image_film:
            raise ValueError("policy.image_film reads the pooled instruction: set policy.language_tokens=0")
        if min(self.d_model, self.heads, self.layers, self.expert_layers, self.flow_steps) < 1:
            raise ValueError("policy.d_model, heads, layers, expert_layers and flow_steps must be >= 1")
        if self.d_model % self.heads or self.d_model % 2:
            raise ValueError(f"policy.d_model ({self.d_model}) must be even and divisible by heads ({self.heads})")

    def build(self, obs_dim: int, action_dim: int, ranges: Ranges, vision: dict[str, Any]) -> ChunkPolicy:
        """:class:`~policies.nets.vla.VLAPolicy` with its flow sampler."""
        from policies.nets.vla import FlowSettings, VLAPolicy

        o_lo, o_hi, a_lo, a_hi = ranges
        return VLAPolicy(
            obs_dim, action_dim, self.horizons, o_lo, o_hi, a_lo, a_hi, d_model=self.d_model, heads=self.heads,
            layers=self.layers, expert_layers=self.expert_layers, flow=FlowSettings(self.flow_steps),
            language_tokens=self.language_tokens,
            **{**vision, "language_dim": vision["language_dim"] * max(self.language_tokens, 1)},
        )  # fmt: skip


def student_config(data: Any, where: str = "policy", legacy: bool = False) -> StudentConfig:
    """The student config of plain data: its ``kind`` (default ``diffusion``) picks the class.

    Args:
        data: The ``policy`` section.
        where: Config path, for messages.
        legacy: Drop keys the kind does not have (a checkpoint of the earlier flat config holds every kind's).

    Raises:
        ConfigError: Unknown kind, unknown key, wrong type or invalid value.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must be a mapping, got {type(data).__name__}")
    kind = data.get("kind", "diffusion")
    if kind not in STUDENTS:
        raise ConfigError(f"{where}.kind '{kind}' is not a student kind; choose one of {', '.join(sorted(STUDENTS))}")
    cls = STUDENTS[kind]
    if legacy:
        names = {f.name for f in fields(cls)}
        data = {k: v for k, v in data.items() if k in names}
    return from_dict(cls, {**data, "kind": kind}, where)


def build_student(
    p: StudentConfig,
    obs_dim: int,
    action_dim: int,
    stats: dict[str, Any],
    cameras: dict[str, tuple[int, int]] | None = None,
) -> ChunkPolicy:
    """The student network for ``p`` with min-max statistics ``stats`` (``{feature: {min, max}}``), seeing the
    images of ``cameras`` (name -> ``(height, width)``; must cover ``p.cameras``).

    Raises:
        ConfigError: ``p.cameras`` names a camera the dataset lacks, or one whose images are under 8 x 8.
    """
    sizes = cameras or {}
    missing = [c for c in p.cameras if c not in sizes]
    if missing:
        raise ConfigError(
            f"policy.cameras names {missing}, but the dataset has images of {sorted(sizes) or 'no camera'} "
            "(robot-rl collect --images CAMERA records them)"
        )
    small = [f"'{c}' ({sizes[c][0]}x{sizes[c][1]})" for c in p.cameras if min(sizes[c]) < 8]
    if small:
        raise ConfigError(f"camera images {', '.join(small)} are too small for the image encoder (at least 8x8)")
    vision: dict[str, Any] = {
        "cameras": {c: sizes[c] for c in p.cameras},
        "image_features": p.image_features,
        "image_shift": p.image_shift,
        "language_dim": LANGUAGE_DIM if p.language else 0,
        "image_film": p.image_film,
    }
    s, a = stats["observation.state"], stats["action"]
    return p.build(obs_dim, action_dim, (s["min"], s["max"], a["min"], a["max"]), vision)
