"""Static graph + deployment contract -> C99 source: ``rr_policy.h`` and ``rr_policy.c``.

The generated code has no heap, no global mutable state (re-entrant: every intermediate lives on the caller's
stack) and needs only ``<math.h>``, ``<string.h>`` and ``<float.h>``. Its API, for ``D = RR_OBS_DIM`` inputs and
``A = RR_ACTION_DIM`` commands::

    int rr_policy_step(const float obs[D], float command[A]);        /* RR_OK, or an RR_ERR_* code */
    void rr_obs_reset(rr_obs_state *s);                                /* next sample fills every history */
    int rr_obs_check(const rr_signals *sig);                           /* what rr_obs_build would refuse */
    int rr_obs_build(rr_obs_state *s, const rr_signals *sig, float obs[D]);
    void rr_normalized_action(const float command[A], float last_action[A]);

``rr_policy_step`` refuses a non-finite input (``RR_ERR_NONFINITE_INPUT``) and never writes a non-finite command
(``RR_ERR_NONFINITE_OUTPUT``; ``command`` is left untouched). ``rr_obs_build`` follows
``policies.runtime.observation.ObservationBuilder`` exactly: terms in contract order, each signal times its scale,
histories newest first, a fresh state fills the whole history with its first sample; a non-finite signal returns
``RR_ERR_NONFINITE_SIGNAL`` without touching the histories.

Text from the model file (ONNX node and initializer names, the contract's task, term, signal, unit and actuator
names) appears only inside comments, each piece passed through :func:`policies.runtime.text.c_comment`, and as
identifiers through :func:`c_name`; :func:`check_generated` re-reads every generated file before it is compiled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from firmware_export.graph import Graph, Node, UnsupportedModelError, weight_nk
from policies.runtime.contract import Contract
from policies.runtime.passivity import TankParams
from policies.runtime.text import c_comment

UNARY = {
    "Relu": "{x} > 0.0f ? {x} : 0.0f",
    "Tanh": "tanhf({x})",
    "Sigmoid": "1.0f / (1.0f + expf(-{x}))",
    "Neg": "-{x}",
}
BINARY = {"Add": "{a} + {b}", "Sub": "{a} - {b}", "Mul": "{a} * {b}", "Div": "{a} / {b}"}
VARIADIC = {"Max": "fmaxf", "Min": "fminf"}


@dataclass
class CSources:
    """Generated files: name -> text."""

    files: dict[str, str]


def c_name(text: str) -> str:
    """A valid C identifier for ``text`` (signal and term names come from contracts)."""
    name = re.sub(r"[^0-9A-Za-z_]", "_", text)
    return name if re.match(r"[A-Za-z_]", name) else f"s_{name}"


def _c_names(texts: list[str], what: str) -> dict[str, str]:
    """``{text: c_name(text)}``, refusing two texts that become the same identifier (``a.b`` and ``a_b``)."""
    out: dict[str, str] = {}
    for t in texts:
        clash = [k for k, v in out.items() if v == c_name(t) and k != t]
        if clash:
            raise UnsupportedModelError(
                f"{what} '{c_comment(clash[0])}' and '{c_comment(t)}' both become the C identifier '{c_name(t)}'"
            )
        out[t] = c_name(t)
    return out


_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIRECTIVE = re.compile(
    r'#(include <(float|math|string)\.h>|include "rr_policy\.h"|ifndef RR_[A-Z_]+|define RR_[A-Z0-9_]+( .*)?|endif.*)'
)
C_WORDS = frozenset(
    [
        "const",
        "static",
        "float",
        "int",
        "void",
        "return",
        "for",
        "if",
        "else",
        "typedef",
        "struct",
        "sizeof",
        "extern",
        "double",
        "isfinite",
        "tanhf",
        "expf",
        "fmaxf",
        "fminf",
        "fabsf",
        "signed",
        "char",
        "long",
        "memcpy",
        "memmove",
        "f",
        "e",
        "i",
        "j",
        "k",
        "m",
        "n",
        "o",
        "s",
        "v",
        "w",
        "x",
        "a0",
        "a1",
        "a2",
        "a3",
        "sig",
        "obs",
        "command",
        "last_action",
        "fresh",
    ]
)
"""Identifiers generated code may use besides its own ``rr_``/``RR_`` symbols, ``t<k>``/``k<k>`` buffers and the
contract's names as :func:`c_name` writes them: C keywords, the math and string functions it calls, its locals."""


def check_generated(files: dict[str, str], names: set[str]) -> None:
    """Refuse generated C that holds anything but the exporter's own code outside comments (a second line of
    defence behind :func:`~policies.runtime.text.c_comment`): no string or character literal, no preprocessor line
    but the exporter's, and no identifier but :data:`C_WORDS`, ``rr_*``/``RR_*``, ``t<k>``/``k<k>`` and ``names``
    (the contract's signal and term identifiers). A file text that escaped its comment would show up here.

    Raises:
        UnsupportedModelError: Naming the file and the first foreign piece.
    """
    for fname, text in files.items():
        code = _COMMENT.sub(" ", text)
        for line in code.splitlines():
            stripped = line.strip()
            if stripped.startswith("#"):
                if _DIRECTIVE.fullmatch(stripped) is None:
                    raise UnsupportedModelError(f"generated {fname} holds a foreign directive: {c_comment(stripped)}")
                continue
            if any(ch in line for ch in "\"'\\@`$") or "??" in line:
                raise UnsupportedModelError(f"generated {fname} holds a foreign character: {c_comment(stripped)}")
            for word in _IDENT.findall(re.sub(r"\b\d[\w.]*", " ", line)):
                if not (word in C_WORDS or word in names or re.fullmatch(r"(rr_|RR_)\w+|[tk]\d+", word)):
                    raise UnsupportedModelError(
                        f"generated {fname} uses the identifier '{word}', which the exporter does not write"
                    )


def c_float(v: float) -> str:
    """A float literal that round-trips float32 exactly."""
    f = float(np.float32(v))
    if f == 0.0:
        return "0.0f"
    return f"{f:.9g}f" if ("e" in f"{f:.9g}" or "." in f"{f:.9g}") else f"{f:.9g}.0f"


def c_array(values: np.ndarray, per_line: int = 8) -> str:
    """Comma-separated float32 literals, a few per line."""
    flat = [c_float(float(v)) for v in np.asarray(values, dtype=np.float32).reshape(-1)]
    rows = [", ".join(flat[i : i + per_line]) for i in range(0, len(flat), per_line)]
    return "\n    " + ",\n    ".join(rows) + "\n"


ROUND_MAGIC = "12582912.0f"
"""1.5 * 2^23: ``(v + M) - M`` rounds a float with ``|v| < 2^22`` to the nearest integer, ties to even, in the
default IEEE rounding mode (ONNX ``QuantizeLinear``'s rounding) with two additions instead of a ``rintf`` call."""


def c_int_array(values: np.ndarray, per_line: int = 24) -> str:
    """Comma-separated integer literals, a few dozen per line."""
    flat = [str(int(v)) for v in np.asarray(values).reshape(-1)]
    rows = [", ".join(flat[i : i + per_line]) for i in range(0, len(flat), per_line)]
    return "\n    " + ",\n    ".join(rows) + "\n"


def generate(graph: Graph, contract: Contract, prefix: str = "rr") -> CSources:
    """C header and source for ``graph`` with the observation helpers and constants of ``contract``.

    Raises:
        UnsupportedModelError: The graph's input or output size disagrees with the contract.
    """
    if (graph.input_name, graph.output_name) != (contract.input_name, contract.output_name):
        raise UnsupportedModelError(
            f"graph input/output are '{graph.input_name}'/'{graph.output_name}', the contract names "
            f"'{contract.input_name}'/'{contract.output_name}'"
        )
    d_in = int(np.prod(graph.shapes[graph.input_name]))
    d_out = int(np.prod(graph.shapes[graph.output_name]))
    if d_in != contract.obs_dim or d_out != contract.action.size:
        raise UnsupportedModelError(
            f"graph maps {d_in} inputs to {d_out} outputs; the contract says {contract.obs_dim} and "
            f"{contract.action.size}"
        )
    idents = {*_c_names(list(_signals(contract)), "signal").values()}
    terms = _c_names([t.name for t in contract.observation], "observation term").values()
    idents |= {*terms, *(f"{t}_integral" for t in terms)}
    body = _Body(graph)
    files = {"rr_policy.h": _header(contract), "rr_policy.c": _source(graph, contract, body)}
    check_generated(files, idents)
    return CSources(files)


# --------------------------------------------------------------------------------------------- the graph
class _Body:
    """Constants and the statement list of ``rr_policy_step``."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.consts: dict[str, str] = {}  # tensor -> C symbol of a static const array
        self.const_defs: list[str] = []
        self.bufs: dict[str, str] = {graph.input_name: "obs"}  # tensor -> C expression of its float array
        self.locals: list[str] = []
        self.lines: list[str] = []
        for node in graph.nodes:
            self._emit(node)
        out = self.bufs[graph.output_name]
        self.output = out

    def _const(self, name: str, values: np.ndarray | None = None) -> str:
        if name not in self.consts:
            sym = f"k{len(self.consts)}"
            arr = self.graph.constants[name] if values is None else values
            self.consts[name] = sym
            if arr.dtype == np.int8:
                decl = f"static const signed char {sym}[{max(1, arr.size)}] = {{{c_int_array(arr)}}};"
            else:
                decl = f"static const float {sym}[{max(1, arr.size)}] = {{{c_array(arr)}}};"
            self.const_defs.append(f"/* {c_comment(name)}: {list(np.shape(arr))} */\n{decl}")
        return self.consts[name]

    def _ref(self, name: str) -> str:
        return self._const(name) if name in self.graph.constants else self.bufs[name]

    def _buf(self, node: Node) -> str:
        sym = f"t{len(self.locals)}"
        self.locals.append(f"RR_LOCAL float {sym}[{int(np.prod(self.graph.shapes[node.output]))}];")
        self.bufs[node.output] = sym
        return sym

    def _index(self, name: str, out_shape: tuple[int, ...]) -> str:
        """C expression of the element of ``name`` that broadcasts to flat output index ``i``."""
        shape = self.graph.shapes[name]
        size, total = int(np.prod(shape)), int(np.prod(out_shape))
        if size == total:
            return "i"
        if size == 1:
            return "0"
        padded = (1,) * (len(out_shape) - len(shape)) + tuple(shape)
        out_strides = np.cumprod((1, *out_shape[::-1]))[:-1][::-1]
        in_strides = np.cumprod((1, *padded[::-1]))[:-1][::-1]
        terms = [
            f"((i / {int(os_)}) % {int(od)}) * {int(is_)}"
            for od, pd, os_, is_ in zip(out_shape, padded, out_strides, in_strides, strict=True)
            if pd == od and od > 1
        ]
        return " + ".join(terms) if terms else "0"

    def _loop(self, node: Node, expr: str) -> None:
        n = int(np.prod(self.graph.shapes[node.output]))
        out = self._buf(node)
        self.lines.append(f"/* {node.op} {c_comment(node.name)} */")
        self.lines.append(f"for (i = 0; i < {n}; ++i) {out}[i] = {expr};")

    def _emit(self, node: Node) -> None:
        g, op = self.graph, node.op
        shape = g.shapes[node.output]
        ins = [i for i in node.inputs if i]
        if op in ("Reshape", "Flatten", "Identity"):
            self.bufs[node.output] = self._ref(ins[0])
            return
        if op in ("Gemm", "MatMul"):
            self._gemm(node)
            return
        if op == "QGemm":
            self._qgemm(node)
            return
        if op in UNARY or op in ("Elu", "LeakyRelu"):
            x = f"{self._ref(ins[0])}[i]"
            if op == "Elu":
                expr = f"{x} > 0.0f ? {x} : {c_float(node.attrs.get('alpha', 1.0))} * (expf({x}) - 1.0f)"
            elif op == "LeakyRelu":
                expr = f"{x} >= 0.0f ? {x} : {c_float(node.attrs.get('alpha', 0.01))} * {x}"
            else:
                expr = UNARY[op].format(x=x)
            self._loop(node, expr)
        elif op in BINARY:
            a, b = (f"{self._ref(v)}[{self._index(v, shape)}]" for v in ins)
            self._loop(node, BINARY[op].format(a=a, b=b))
        elif op in VARIADIC:
            expr = f"{self._ref(ins[0])}[{self._index(ins[0], shape)}]"
            for v in ins[1:]:
                expr = f"{VARIADIC[op]}({expr}, {self._ref(v)}[{self._index(v, shape)}])"
            self._loop(node, expr)
        elif op == "Clip":
            lo = float(g.constants[node.inputs[1]].reshape(-1)[0]) if len(node.inputs) > 1 and node.inputs[1] else None
            hi = float(g.constants[node.inputs[2]].reshape(-1)[0]) if len(node.inputs) > 2 and node.inputs[2] else None
            lo = node.attrs.get("min", lo)
            hi = node.attrs.get("max", hi)
            expr = f"{self._ref(ins[0])}[i]"
            if lo is not None:
                expr = f"fmaxf({expr}, {c_float(lo)})"
            if hi is not None:
                expr = f"fminf({expr}, {c_float(hi)})"
            self._loop(node, expr)
        elif op == "Concat":
            self._concat(node)
        else:  # pragma: no cover - graph.C_OPS and this switch list the same operators
            raise UnsupportedModelError(f"node '{node.name}': no C kernel for {op}")

    def _gemm(self, node: Node) -> None:
        g = self.graph
        x, w_name = node.inputs[0], node.inputs[1]
        w_nk = weight_nk(g, node).astype(np.float32)  # stored [N, K]: the inner loop walks contiguous memory
        alpha = float(node.attrs.get("alpha", 1.0)) if node.op == "Gemm" else 1.0
        beta = float(node.attrs.get("beta", 1.0)) if node.op == "Gemm" else 1.0
        n_out, k = w_nk.shape
        m = g.shapes[x][0]
        bias = self._bias(node, n_out, beta)
        wsym = self._const(f"{w_name} ({node.name}, [N, K])", np.ascontiguousarray(alpha * w_nk, dtype=np.float32))
        bsym = self._const(f"bias of {node.name}", bias)
        xin, out = self._ref(x), self._buf(node)
        self.lines += [  # four partial sums: a quarter of the loop overhead, independent FPU chains
            f"/* {node.op} {c_comment(node.name)}: [{m}, {k}] x [{k}, {n_out}] */",
            f"for (m = 0; m < {m}; ++m) {{",
            f"    for (n = 0; n < {n_out}; ++n) {{",
            f"        const float *w = {wsym} + n * {k};",
            f"        const float *x = {xin} + m * {k};",
            f"        float a0 = {bsym}[n], a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;",
            f"        for (k = 0; k + 4 <= {k}; k += 4) {{",
            "            a0 += w[k] * x[k];",
            "            a1 += w[k + 1] * x[k + 1];",
            "            a2 += w[k + 2] * x[k + 2];",
            "            a3 += w[k + 3] * x[k + 3];",
            "        }",
            f"        for (; k < {k}; ++k) a0 += w[k] * x[k];",
            f"        {out}[m * {n_out} + n] = (a0 + a1) + (a2 + a3);",
            "    }",
            "}",
        ]

    def _bias(self, node: Node, n_out: int, beta: float) -> np.ndarray:
        """The bias of a matrix product, ``beta * C`` broadcast to ``[N]`` (zeros without one)."""
        if len(node.inputs) < 3 or not node.inputs[2] or node.op == "MatMul":
            return np.zeros(n_out, dtype=np.float32)
        c = self.graph.constants[node.inputs[2]]
        if c.size not in (1, n_out):
            raise UnsupportedModelError(f"node '{node.name}' ({node.op}): bias of shape {c.shape} is not supported")
        return np.broadcast_to(beta * c.reshape(-1), (n_out,)).astype(np.float32)

    def _qgemm(self, node: Node) -> None:
        """An int8 product (:func:`firmware_export.graph.qgemm`): quantise the input row into an int8 buffer (a NaN
        returns ``RR_ERR_NONFINITE_OUTPUT``; rounding by :data:`ROUND_MAGIC`), dot products in 32-bit integers, one
        float scale per output."""
        g = self.graph
        w_nk = np.ascontiguousarray(weight_nk(g, node))
        n_out, k = w_nk.shape
        m = g.shapes[node.inputs[0]][0]
        wsym = self._const(f"{node.inputs[1]} ({node.name}, int8 [N, K])", w_nk)
        ssym = self._const(f"output scales of {node.name}", np.asarray(node.attrs["scale"]))
        xsym = self._const(f"input steps of {node.name}", np.asarray(node.attrs["x_step"]))
        bsym = self._const(f"bias of {node.name}", self._bias(node, n_out, float(node.attrs.get("beta", 1.0))))
        xin, out = self._ref(node.inputs[0]), self._buf(node)
        q = f"t{len(self.locals)}"
        self.locals.append(f"RR_LOCAL signed char {q}[{k}];")
        self.lines += [
            f"/* QGemm {c_comment(node.name)}: int8 [{m}, {k}] x [{k}, {n_out}] */",
            f"for (m = 0; m < {m}; ++m) {{",
            f"    for (k = 0; k < {k}; ++k) {{",
            f"        float v = {xin}[m * {k} + k] / {xsym}[k];",
            "        if (v != v) return RR_ERR_NONFINITE_OUTPUT;",
            "        v = v > 127.0f ? 127.0f : (v < -128.0f ? -128.0f : v);",
            f"        {q}[k] = (signed char)((v + {ROUND_MAGIC}) - {ROUND_MAGIC});",
            "    }",
            f"    for (n = 0; n < {n_out}; ++n) {{",
            f"        const signed char *w = {wsym} + n * {k};",
            "        long a0 = 0, a1 = 0, a2 = 0, a3 = 0;",
            f"        for (k = 0; k + 4 <= {k}; k += 4) {{",
            f"            a0 += w[k] * {q}[k];",
            f"            a1 += w[k + 1] * {q}[k + 1];",
            f"            a2 += w[k + 2] * {q}[k + 2];",
            f"            a3 += w[k + 3] * {q}[k + 3];",
            "        }",
            f"        for (; k < {k}; ++k) a0 += w[k] * {q}[k];",
            f"        {out}[m * {n_out} + n] = (float)((a0 + a1) + (a2 + a3)) * {ssym}[n] + {bsym}[n];",
            "    }",
            "}",
        ]

    def _concat(self, node: Node) -> None:
        g = self.graph
        shape = g.shapes[node.output]
        axis = int(node.attrs["axis"]) % len(shape)
        outer = int(np.prod(shape[:axis]))
        inner_out = int(np.prod(shape[axis:]))
        out = self._buf(node)
        self.lines.append(f"/* Concat {c_comment(node.name)} */")
        offset = 0
        for v in (i for i in node.inputs if i):
            inner = int(np.prod(g.shapes[v][axis:]))
            src = self._ref(v)
            self.lines.append(
                f"for (m = 0; m < {outer}; ++m) for (i = 0; i < {inner}; ++i) "
                f"{out}[m * {inner_out} + {offset} + i] = {src}[m * {inner} + i];"
            )
            offset += inner


# ------------------------------------------------------------------------------------------------ files
def _signals(contract: Contract) -> dict[str, int]:
    sources: dict[str, int] = {}
    for t in contract.observation:
        sources.setdefault(t.source, t.size)
    return sources


def _header(c: Contract) -> str:
    a = c.action
    fields = "\n".join(f"    float {c_name(s)}[{n}];" for s, n in _signals(c).items())
    hist = "\n".join(f"    float {c_name(t.name)}[{t.history}][{t.size}]; /* newest first */" for t in c.observation)
    hist += "".join(
        f"\n    float {c_name(t.name)}_integral[{t.size}]; /* clipped to +-{t.integral_limit:g}"
        + (f", adds samples within +-{t.integral_band:g}" if t.integral_band > 0 else "")
        + " */"
        for t in c.observation
        if t.integral_limit > 0
    )
    layout = "\n".join(
        c_comment(
            f"{t.name:<24} {t.size} x {t.history}  <- "
            f"{'integral of ' if t.integral_limit > 0 else ''}{t.source} x {t.scale:g} {t.unit}"
        ).join((" *   ", ""))
        for t in c.observation
    )
    names = c_comment(", ".join(a.names))
    return f"""/* Generated by robot-rl firmware_export from the policy of task '{c_comment(c.task)}'. Do not edit.
 *
 * Observation layout ({c.obs_dim} floats, in this order; histories newest first):
{layout}
 * Commands ({a.size}, {c_comment(a.kind)}, {c_comment(a.unit)}): {names}
 *   command = clip(offset + scale * clip(a, -1, 1), low, high), computed inside rr_policy_step.
 * Control period: {c.control_period_s:g} s.
 */
#ifndef RR_POLICY_H
#define RR_POLICY_H

{"#define RR_HAS_LAST_ACTION 1" if "last_action" in _signals(c) else "/* no last_action signal */"}
{_tank_defaults(c)}
/* rr_policy_step keeps its intermediates on the caller's stack (re-entrant; the export report gives the bytes).
 * Build with -DRR_STATIC_BUFFERS to keep them in static RAM instead (not re-entrant: one caller at a time) where the
 * calling task's stack is small (a flight controller's stabilizer task). */
#ifndef RR_STATIC_BUFFERS
#define RR_LOCAL
#endif
#ifndef RR_LOCAL
#define RR_LOCAL static
#endif

#define RR_OBS_DIM {c.obs_dim}
#define RR_ACTION_DIM {a.size}
#define RR_CONTROL_PERIOD_S {c_float(c.control_period_s)}
/* The period rr_obs_build is called at, s: integral terms integrate over it. Build with -DRR_OBS_DT=... to run the
 * policy at another rate than it was trained at (after `robot-rl eval RUN --control-rate HZ` says it holds). */
#ifndef RR_OBS_DT
#define RR_OBS_DT RR_CONTROL_PERIOD_S
#endif

#define RR_OK 0
#define RR_ERR_NONFINITE_INPUT (-1)
#define RR_ERR_NONFINITE_OUTPUT (-2)
#define RR_ERR_NONFINITE_SIGNAL (-3)

/* Raw robot signals, SI units, one field per signal the contract reads. */
typedef struct {{
{fields}
}} rr_signals;

/* Observation histories (caller-owned: the library keeps no state). */
typedef struct {{
{hist}
    int fresh;
}} rr_obs_state;

extern const float rr_action_offset[RR_ACTION_DIM];
extern const float rr_action_scale[RR_ACTION_DIM];
extern const float rr_action_low[RR_ACTION_DIM];
extern const float rr_action_high[RR_ACTION_DIM];

int rr_policy_step(const float obs[RR_OBS_DIM], float command[RR_ACTION_DIM]);
void rr_obs_reset(rr_obs_state *s);
int rr_obs_check(const rr_signals *sig); /* RR_OK, or RR_ERR_NONFINITE_SIGNAL: what rr_obs_build would refuse */
int rr_obs_build(rr_obs_state *s, const rr_signals *sig, float obs[RR_OBS_DIM]);
void rr_normalized_action(const float command[RR_ACTION_DIM], float last_action[RR_ACTION_DIM]);

#endif /* RR_POLICY_H */
"""


def _tank_defaults(c: Contract) -> str:
    """Energy-tank defaults from the contract's ``filter`` section (``TankParams`` defaults where absent)."""
    p = TankParams.from_contract(c.filter)
    damping = ", ".join(f"{v:.17g}" for v in p.damping)
    return (
        f"#define RR_TANK_T_INIT {p.t_init:.17g}\n#define RR_TANK_T_MIN {p.t_min:.17g}\n"
        f"#define RR_TANK_T_MAX {p.t_max:.17g}\n#define RR_TANK_MARGIN {p.margin:.17g}\n"
        f"#define RR_TANK_POWER {p.power_w:.17g}\n"
        f"#define RR_TANK_DAMPING {{{damping}}}\n#define RR_TANK_N_DAMPING {len(p.damping)}"
    )


def _obs_builder(c: Contract) -> str:
    checks, pushes, reads = [], [], []
    for s, n in _signals(c).items():
        checks.append(
            f"    for (i = 0; i < {n}; ++i) if (!isfinite(sig->{c_name(s)}[i])) return RR_ERR_NONFINITE_SIGNAL;"
        )
    for t in c.observation:
        h, name, src = t.history, c_name(t.name), c_name(t.source)
        scale = c_float(t.scale)
        bad = f"!isfinite(sig->{src}[i] * {scale})"
        checks.append(f"    for (i = 0; i < {t.size}; ++i) if ({bad}) return RR_ERR_NONFINITE_SIGNAL;")
        value = f"sig->{src}[i] * {scale}"
        if t.integral_limit > 0:  # I = clip(I + dt * s, -L, L), restarted from 0 with the episode
            lim, integral, add = c_float(t.integral_limit), f"s->{name}_integral[i]", f"sig->{src}[i]"
            if t.integral_band > 0:  # conditional integration: only samples with |s| < band add
                add = f"(fabsf({add}) < {c_float(t.integral_band)} ? {add} : 0.0f)"
            pushes.append(
                f"    for (i = 0; i < {t.size}; ++i) {{ float v = (s->fresh ? 0.0f : {integral}) + "
                f"RR_OBS_DT * {add}; {integral} = v > {lim} ? {lim} : (v < -{lim} ? -{lim} : v); }}"
            )
            value = f"{integral} * {scale}"
        if h > 1:
            pushes.append(
                f"    if (s->fresh) {{ for (j = 0; j < {h}; ++j) for (i = 0; i < {t.size}; ++i) "
                f"s->{name}[j][i] = {value}; }}\n"
                f"    else {{ memmove(s->{name}[1], s->{name}[0], sizeof(float) * {(h - 1) * t.size}); "
                f"for (i = 0; i < {t.size}; ++i) s->{name}[0][i] = {value}; }}"
            )
        else:
            pushes.append(f"    for (i = 0; i < {t.size}; ++i) s->{name}[0][i] = {value};")
        reads.append(f"    memcpy(obs + o, s->{name}, sizeof(float) * {t.dim}); o += {t.dim};")
    return "\n".join(
        [
            "void rr_obs_reset(rr_obs_state *s) { s->fresh = 1; }",
            "",
            "int rr_obs_check(const rr_signals *sig) {",
            "    int i;",
            *checks,
            "    return RR_OK;",
            "}",
            "",
            "int rr_obs_build(rr_obs_state *s, const rr_signals *sig, float obs[RR_OBS_DIM]) {",
            "    int i, j, o = 0;",
            "    (void)j;",
            "    if (rr_obs_check(sig) != RR_OK) return RR_ERR_NONFINITE_SIGNAL;",
            *pushes,
            "    s->fresh = 0;",
            *reads,
            "    return RR_OK;",
            "}",
        ]
    )


def _source(g: Graph, c: Contract, body: _Body) -> str:
    a = c.action
    consts = "\n\n".join(body.const_defs)
    locals_ = "\n    ".join(body.locals) or "/* no intermediates */"
    code = "\n    ".join(body.lines)
    return f"""/* Generated by robot-rl firmware_export from the policy of task '{c_comment(c.task)}'. Do not edit.
 * {g.parameters} parameters, {g.macs} multiply-accumulates per step. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "rr_policy.h"

const float rr_action_offset[RR_ACTION_DIM] = {{{c_array(np.asarray(a.offset))}}};
const float rr_action_scale[RR_ACTION_DIM] = {{{c_array(np.asarray(a.scale))}}};
const float rr_action_low[RR_ACTION_DIM] = {{{c_array(np.asarray(a.low))}}};
const float rr_action_high[RR_ACTION_DIM] = {{{c_array(np.asarray(a.high))}}};

{consts}

int rr_policy_step(const float obs[RR_OBS_DIM], float command[RR_ACTION_DIM]) {{
    int i, m, n, k;
    {locals_}
    (void)m; (void)n; (void)k;
    for (i = 0; i < RR_OBS_DIM; ++i) if (!isfinite(obs[i])) return RR_ERR_NONFINITE_INPUT;
    {code}
    for (i = 0; i < RR_ACTION_DIM; ++i) if (!isfinite({body.output}[i])) return RR_ERR_NONFINITE_OUTPUT;
    for (i = 0; i < RR_ACTION_DIM; ++i) command[i] = {body.output}[i];
    return RR_OK;
}}

{_obs_builder(c)}

void rr_normalized_action(const float command[RR_ACTION_DIM], float last_action[RR_ACTION_DIM]) {{
    int i;
    for (i = 0; i < RR_ACTION_DIM; ++i) {{
        float v = (command[i] - rr_action_offset[i]) / rr_action_scale[i];
        last_action[i] = v < -1.0f ? -1.0f : (v > 1.0f ? 1.0f : v);
    }}
}}
"""
