"""ONNX's recurrent layers: RNN, GRU and LSTM.

The input projection of every time step is one matmul; the recurrence then unrolls on the
host, one small graph per step, all lazy, so a whole sequence is one fusegrad graph. A batch
entry past its ``sequence_lens`` keeps its state and outputs zeros. ``bidirectional`` runs a
second pass backwards (within each sequence's length) and stacks both along the direction axis.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fusegrad.dtype import dtypes
from fusegrad.errors import InvalidValue
from fusegrad.nn.onnx.ops_nn import bad_choice, text
from fusegrad.nn.onnx.registry import Node, onnx_op
from fusegrad.nn.onnx.runner import onnx_check
from fusegrad.tensor import Tensor

Activation = Callable[[Tensor], Tensor]


def _activation_table(a: float | None, b: float | None) -> dict[str, Activation]:
    """ONNX's RNN activations by lower-case name, with alpha ``a`` and beta ``b``."""
    return {
        "relu": lambda x: x.relu(),
        "tanh": lambda x: x.tanh(),
        "sigmoid": lambda x: x.sigmoid(),
        "affine": lambda x: x * (1.0 if a is None else a) + (0.0 if b is None else b),
        "leakyrelu": lambda x: x.leaky_relu(0.01 if a is None else a),
        "thresholdedrelu": lambda x: (x > (1.0 if a is None else a)).where(x, 0.0),
        "scaledtanh": lambda x: (x * (1.0 if b is None else b)).tanh() * (1.0 if a is None else a),
        "hardsigmoid": lambda x: (x * (0.2 if a is None else a) + (0.5 if b is None else b)).clip(
            0, 1
        ),
        "elu": lambda x: x.elu(1.0 if a is None else a),
        "softsign": lambda x: x / (1 + x.abs()),
        "softplus": lambda x: x.softplus(),
    }


def _activation(name: str, alpha: float | None, beta: float | None) -> Activation:
    """An ONNX RNN activation by name; alpha and beta where the function takes them."""
    table = _activation_table(alpha, beta)
    if name.lower() not in table:
        raise InvalidValue(
            f"unknown RNN activation {name!r}; ONNX allows {', '.join(sorted(table))}"
        )
    return table[name.lower()]


#: the parameters of activations that take alpha / beta, consumed in order from the lists
_TAKES_ALPHA = {"affine", "leakyrelu", "thresholdedrelu", "scaledtanh", "hardsigmoid", "elu"}
_TAKES_BETA = {"affine", "scaledtanh", "hardsigmoid"}


def _activations(node: Node, defaults: list[str], dirs: int) -> list[list[Activation]]:
    """Per direction, the activation functions (``defaults`` unless ``activations`` is set)."""
    names = [text(n) for n in node.attr("activations", [])] or defaults * dirs
    if len(names) == len(defaults):
        names = names * dirs
    alphas, betas = list(node.attr("activation_alpha", [])), list(node.attr("activation_beta", []))
    fns = []
    for name in names:
        low = name.lower()
        alpha = alphas.pop(0) if low in _TAKES_ALPHA and alphas else None
        beta = betas.pop(0) if low in _TAKES_BETA and betas else None
        fns.append(_activation(name, alpha, beta))
    k = len(defaults)
    return [fns[d * k : (d + 1) * k] for d in range(dirs)]


def _directions(node: Node) -> list[bool]:
    """For each direction, whether it runs backwards."""
    direction = text(node.attr("direction", "forward"))
    return {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[direction]


class Recurrence:
    """What every recurrent op shares: the layout, the time loop and the masks of
    ``sequence_lens``."""

    def __init__(self, node: Node, x: Tensor, seq_lens: Tensor | None, gates: int):
        self.layout = int(node.attr("layout", 0))
        self.x = x.transpose(0, 1) if self.layout else x  # (seq, batch, input)
        self.seq, self.batch = self.x.shape[0], self.x.shape[1]
        self.hidden = int(node.attr("hidden_size"))
        self.clip = node.attr("clip")
        self.gates = gates
        self.lens = None if seq_lens is None else seq_lens.cast(dtypes.int64).reshape(-1, 1)

    def initial(self, state: Tensor | None, d: int) -> Tensor:
        """The initial state of direction ``d``: (batch, hidden)."""
        if state is None:
            return Tensor.zeros((self.batch, self.hidden), dtype=self.x.dtype, device=self.x.device)
        return state[:, d] if self.layout else state[d]

    def projected(self, w: Tensor, b: Tensor | None, d: int) -> Tensor:
        """x W^T + Wb for every step at once: (seq, batch, gates * hidden)."""
        out = self.x.matmul(w[d].transpose(0, 1))
        return out if b is None else out + b[d, : self.gates * self.hidden]

    def cell_input(self, pre: Tensor) -> Tensor:
        return pre if self.clip is None else pre.clip(-float(self.clip), float(self.clip))

    def active(self, t: int) -> Tensor | None:
        """(batch, 1) bool: whether step ``t`` is inside each batch entry's sequence."""
        return None if self.lens is None else self.lens > t

    def steps(self, reverse: bool) -> range:
        return range(self.seq - 1, -1, -1) if reverse else range(self.seq)

    def keep(self, t: int, new: Tensor, old: Tensor) -> Tensor:
        mask = self.active(t)
        return new if mask is None else mask.where(new, old)

    def emitted(self, t: int, h: Tensor) -> Tensor:
        mask = self.active(t)
        return h if mask is None else mask.where(h, 0.0).cast(h.dtype)

    def outputs(self, ys: list[list[Tensor]], finals: list[list[Tensor]]) -> tuple[Tensor, ...]:
        """Y (seq, dirs, batch, hidden) and the final states (dirs, batch, hidden), in the
        node's layout."""
        y = Tensor.stack([Tensor.stack(per_dir, dim=0) for per_dir in ys], dim=1)
        states = [Tensor.stack(list(f), dim=0) for f in zip(*finals, strict=True)]
        if self.layout:
            y = y.permute(2, 0, 1, 3)
            states = [s.transpose(0, 1) for s in states]
        return (y, *states)


def _recurrent_bias(b: Tensor | None, r: Recurrence, d: int) -> Tensor | None:
    return None if b is None else b[d, r.gates * r.hidden :]


def _split(t: Tensor, n: int, hidden: int) -> list[Tensor]:
    return [t[..., k * hidden : (k + 1) * hidden] for k in range(n)]


@onnx_op("RNN")
def rnn(
    node: Node,
    x: Tensor,
    w: Tensor,
    r: Tensor,
    b: Tensor | None = None,
    seq_lens: Tensor | None = None,
    h0: Tensor | None = None,
) -> Any:
    """H_t = f(x_t W^T + H_{t-1} R^T + Wb + Rb)."""
    rec = Recurrence(node, x, seq_lens, 1)
    dirs = _directions(node)
    acts = _activations(node, ["Tanh"], len(dirs))
    ys, finals = [], []
    for d, reverse in enumerate(dirs):
        xw, rb, h = rec.projected(w, b, d), _recurrent_bias(b, rec, d), rec.initial(h0, d)
        rt = r[d].transpose(0, 1)
        out: list[Tensor] = [None] * rec.seq  # type: ignore[list-item]
        for t in rec.steps(reverse):
            pre = xw[t] + h.matmul(rt)
            pre = pre if rb is None else pre + rb
            h = rec.keep(t, acts[d][0](rec.cell_input(pre)), h)
            out[t] = rec.emitted(t, h)
        ys.append(out)
        finals.append([h])
    return rec.outputs(ys, finals)


@onnx_op("GRU")
def gru(
    node: Node,
    x: Tensor,
    w: Tensor,
    r: Tensor,
    b: Tensor | None = None,
    seq_lens: Tensor | None = None,
    h0: Tensor | None = None,
) -> Any:
    """Update gate z, reset gate r, candidate h; ``linear_before_reset`` applies the reset
    after the recurrent matmul."""
    rec = Recurrence(node, x, seq_lens, 3)
    dirs, hid = _directions(node), rec.hidden
    acts = _activations(node, ["Sigmoid", "Tanh"], len(dirs))
    before = bool(node.attr("linear_before_reset", 0))
    ys, finals = [], []
    for d, reverse in enumerate(dirs):
        f, g = acts[d]
        xw, rb, h = rec.projected(w, b, d), _recurrent_bias(b, rec, d), rec.initial(h0, d)
        rz, rr, rh = (r[d][k * hid : (k + 1) * hid].transpose(0, 1) for k in range(3))
        bz, br, bh = _split(rb, 3, hid) if rb is not None else (0.0, 0.0, 0.0)
        out: list[Tensor] = [None] * rec.seq  # type: ignore[list-item]
        for t in rec.steps(reverse):
            xz, xr, xh = _split(xw[t], 3, hid)
            z = f(rec.cell_input(xz + h.matmul(rz) + bz))
            reset = f(rec.cell_input(xr + h.matmul(rr) + br))
            if before:
                cand = xh + reset * (h.matmul(rh) + bh)
            else:
                cand = xh + (reset * h).matmul(rh) + bh
            cand = g(rec.cell_input(cand))
            h = rec.keep(t, (1 - z) * cand + z * h, h)
            out[t] = rec.emitted(t, h)
        ys.append(out)
        finals.append([h])
    return rec.outputs(ys, finals)


@onnx_op("LSTM")
def lstm(
    node: Node,
    x: Tensor,
    w: Tensor,
    r: Tensor,
    b: Tensor | None = None,
    seq_lens: Tensor | None = None,
    h0: Tensor | None = None,
    c0: Tensor | None = None,
    peep: Tensor | None = None,
) -> Any:
    """Gates in ONNX's order i, o, f, c; optional peepholes (i, o, f) look at the cell state;
    ``input_forget`` couples the forget gate to 1 - input gate."""
    rec = Recurrence(node, x, seq_lens, 4)
    dirs, hid = _directions(node), rec.hidden
    acts = _activations(node, ["Sigmoid", "Tanh", "Tanh"], len(dirs))
    coupled = bool(node.attr("input_forget", 0))
    ys, finals = [], []
    for d, reverse in enumerate(dirs):
        f, g, act_h = acts[d]
        xw, rb = rec.projected(w, b, d), _recurrent_bias(b, rec, d)
        if rb is not None:
            xw = xw + rb
        h, c = rec.initial(h0, d), rec.initial(c0, d)
        pi, po, pf = _split(peep[d], 3, hid) if peep is not None else (None, None, None)
        rt = r[d].transpose(0, 1)
        out: list[Tensor] = [None] * rec.seq  # type: ignore[list-item]
        for t in rec.steps(reverse):
            gi, go, gf, gc = _split(xw[t] + h.matmul(rt), 4, hid)
            i = f(rec.cell_input(gi if pi is None else gi + pi * c))
            forget = 1 - i if coupled else f(rec.cell_input(gf if pf is None else gf + pf * c))
            c_new = forget * c + i * g(rec.cell_input(gc))
            o = f(rec.cell_input(go if po is None else go + po * c_new))
            h_new = o * act_h(c_new)
            h, c = rec.keep(t, h_new, h), rec.keep(t, c_new, c)
            out[t] = rec.emitted(t, h)
        ys.append(out)
        finals.append([h, c])
    return rec.outputs(ys, finals)


@onnx_check("RNN")
@onnx_check("GRU")
@onnx_check("LSTM")
def check_recurrent(node: Node) -> str | None:
    """The direction and every activation name must be known when the runner is built."""
    problem = bad_choice(node, {"direction": ("forward", ("forward", "reverse", "bidirectional"))})
    if problem:
        return problem
    for name in node.attr("activations", []):
        if text(name).lower() not in ACTIVATION_NAMES:
            return (
                f"activation {text(name)!r} is not an ONNX RNN activation; use one of "
                f"{', '.join(sorted(ACTIVATION_NAMES))} (any capitalisation)"
            )
    return None


ACTIVATION_NAMES = set(_activation_table(None, None))
