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


#: a recurrent cell: step t and the states (h first) -> the new states
Cell = Callable[[int, list[Tensor]], list[Tensor]]
#: direction d -> its initial states and its cell
Direction = Callable[[int], tuple[list[Tensor], Cell]]


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

    def run(self, directions: list[bool], direction: Direction) -> tuple[Tensor, ...]:
        """Every direction over the sequence, then Y and the final states in the node's layout.
        ``direction(d)`` gives direction d's initial states (h first) and its cell, which maps
        step t and the states to the new states; a sequence shorter than t keeps its own."""
        ys, finals = [], []
        for d, reverse in enumerate(directions):
            states, cell = direction(d)
            out: list[Tensor] = [None] * self.seq  # type: ignore[list-item]
            for t in self.steps(reverse):
                states = [self.keep(t, new, old) for new, old in zip(cell(t, states), states)]
                out[t] = self.emitted(t, states[0])
            ys.append(out)
            finals.append(states)
        return self.outputs(ys, finals)

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
    rec, dirs = Recurrence(node, x, seq_lens, 1), _directions(node)
    acts = _activations(node, ["Tanh"], len(dirs))

    def direction(d: int) -> tuple[list[Tensor], Cell]:
        xw, rb, act = rec.projected(w, b, d), _recurrent_bias(b, rec, d), acts[d][0]
        rt = r[d].transpose(0, 1)

        def cell(t: int, states: list[Tensor]) -> list[Tensor]:
            pre = xw[t] + states[0].matmul(rt)
            return [act(rec.cell_input(pre if rb is None else pre + rb))]

        return [rec.initial(h0, d)], cell

    return rec.run(dirs, direction)


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

    def direction(d: int) -> tuple[list[Tensor], Cell]:
        f, g = acts[d]
        xw, rb = rec.projected(w, b, d), _recurrent_bias(b, rec, d)
        rz, rr, rh = (r[d][k * hid : (k + 1) * hid].transpose(0, 1) for k in range(3))
        bz, br, bh = _split(rb, 3, hid) if rb is not None else (0.0, 0.0, 0.0)

        def cell(t: int, states: list[Tensor]) -> list[Tensor]:
            (h,) = states
            xz, xr, xh = _split(xw[t], 3, hid)
            z = f(rec.cell_input(xz + h.matmul(rz) + bz))
            reset = f(rec.cell_input(xr + h.matmul(rr) + br))
            if before:
                cand = xh + reset * (h.matmul(rh) + bh)
            else:
                cand = xh + (reset * h).matmul(rh) + bh
            cand = g(rec.cell_input(cand))
            return [(1 - z) * cand + z * h]

        return [rec.initial(h0, d)], cell

    return rec.run(dirs, direction)


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

    def direction(d: int) -> tuple[list[Tensor], Cell]:
        f, g, act_h = acts[d]
        xw, rb = rec.projected(w, b, d), _recurrent_bias(b, rec, d)
        if rb is not None:
            xw = xw + rb
        pi, po, pf = _split(peep[d], 3, hid) if peep is not None else (None, None, None)
        rt = r[d].transpose(0, 1)

        def cell(t: int, states: list[Tensor]) -> list[Tensor]:
            h, c = states
            gi, go, gf, gc = _split(xw[t] + h.matmul(rt), 4, hid)
            i = f(rec.cell_input(gi if pi is None else gi + pi * c))
            forget = 1 - i if coupled else f(rec.cell_input(gf if pf is None else gf + pf * c))
            c_new = forget * c + i * g(rec.cell_input(gc))
            o = f(rec.cell_input(go if po is None else go + po * c_new))
            return [o * act_h(c_new), c_new]

        return [rec.initial(h0, d), rec.initial(c0, d)], cell

    return rec.run(dirs, direction)


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
