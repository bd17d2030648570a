"""GGUF reading and dequantization, checked against the gguf package's own numpy code."""

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from gguf import GGMLQuantizationType as Q  # noqa: E402

from fusegrad import Tensor, dtypes  # noqa: E402
from fusegrad.errors import FileFormatError  # noqa: E402
from fusegrad.nn.gguf import (  # noqa: E402
    SCALE_KINDS,
    _half_to_float,
    block_scales,
    dequantize,
    gguf_metadata,
    quantized_linear,
    split_blocks,
)
from fusegrad.nn.state import gguf_load  # noqa: E402

TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"]
#: where the fp16 scales sit in a block of the types gguf cannot quantize (random blocks)
SCALE_BYTES = {"Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}
SHAPE = (8, 512)


def raw_blocks(kind: Q, rng: np.random.Generator) -> np.ndarray:
    """Bytes of a ``SHAPE`` tensor of type ``kind``: quantized by gguf where it can, else random
    blocks with finite fp16 scales."""
    if kind.name not in SCALE_BYTES:
        return gguf.quants.quantize(rng.standard_normal(SHAPE).astype(np.float32), kind)
    per_block, block_bytes = gguf.GGML_QUANT_SIZES[kind]
    blocks = SHAPE[0] * SHAPE[1] // per_block
    raw = rng.integers(0, 256, (blocks, block_bytes), dtype=np.uint8)
    for at in SCALE_BYTES[kind.name]:
        raw[:, at : at + 2] = rng.uniform(-1, 1, (blocks, 1)).astype(np.float16).view(np.uint8)
    return raw.reshape(SHAPE[0], -1)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A GGUF file with one ``SHAPE`` tensor per type, and gguf's dequantization of each."""
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("gguf") / "types.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint32("test.answer", 42)
    expected = {}
    for name in TYPES:
        kind = Q[name]
        raw = raw_blocks(kind, rng)
        writer.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=kind)
        expected[name] = gguf.quants.dequantize(raw, kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path, expected


@pytest.mark.parametrize("name", TYPES)
def test_dequantization_equals_gguf_numpy(written, name):
    path, expected = written
    metadata, tensors = gguf_load(path)
    assert metadata["test.answer"] == 42 and tensors[name].shape == SHAPE
    np.testing.assert_array_equal(tensors[name].numpy(), expected[name])


@pytest.mark.parametrize("name", ["Q5_0", "Q4_K", "Q5_K", "Q6_K"])
def test_a_tensor_loaded_on_another_device_than_the_default_dequantizes_there(written, name):
    """The bit shifts the 5- and K-quant unpackers make go to the weight's device."""
    path, expected = written
    _, tensors = gguf_load(path, device="PYTHON")
    assert tensors[name].device == "PYTHON"
    np.testing.assert_array_equal(tensors[name].numpy(), expected[name])


@pytest.mark.parametrize("name", [n for n in TYPES if n not in ("F32", "F16", "BF16")])
def test_quantized_linear_equals_matmul_with_the_dequantized_weight(written, name):
    path, expected = written
    _, tensors = gguf_load(path, packed=True)
    raw, kind, shape = tensors[name]
    x = np.random.default_rng(1).standard_normal((3, SHAPE[1])).astype(np.float32)
    got = quantized_linear(Tensor(x), raw, kind, shape).numpy()
    np.testing.assert_allclose(got, x @ expected[name].T, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("name", [n for n in TYPES if n not in ("F32", "F16", "BF16")])
def test_quantized_linear_with_its_blocks_scales_decoded_once(written, name):
    """``block_scales`` (4- and 5-bit types and Q8_0; None for the others): float16 scales and
    offsets per group, and the product is the dequantized matmul's: for the 4- and 5-bit types
    one kernel of its own (one sum over each row, no partial dots per group); Q8_0's partial
    dots read its scales from that buffer (two kernels: the dots, then their sum)."""
    path, expected = written
    _, tensors = gguf_load(path, packed=True)
    raw, kind, shape = tensors[name]
    scales = block_scales(raw, kind, shape)
    if name not in SCALE_KINDS:
        assert scales is None
        return
    assert scales[0].dtype == dtypes.float16 and scales[0].shape == (shape[0], shape[1] // 32, 1)
    assert (scales[1] is None) == (name in ("Q4_0", "Q5_0", "Q8_0"))
    x = np.random.default_rng(1).standard_normal((3, SHAPE[1])).astype(np.float32)
    out = quantized_linear(Tensor(x), raw, kind, shape, scales)
    assert len(out.schedule()) == (2 if name == "Q8_0" else 1)
    np.testing.assert_allclose(out.numpy(), x @ expected[name].T, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("name", [n for n in TYPES if n not in ("F32", "F16", "BF16")])
def test_a_weight_kept_as_values_and_scales(written, name):
    """``split_blocks`` (Q4_0, Q4_1 and Q8_0; None for the others): each block's values (16
    bytes of nibbles, or 32 bytes) as the file has them, its float16 scales decoded to float32
    (2 bytes more each); dequantized bit for bit as gguf does, and its product with ``x`` the
    dequantized matmul's."""
    path, expected = written
    _, tensors = gguf_load(path, packed=True)
    raw, kind, shape = tensors[name]
    split = split_blocks(raw, kind, shape)
    if name not in ("Q4_0", "Q4_1", "Q8_0"):
        assert split is None
        return
    scales = [t for t in (split.scale, split.offset) if t is not None]
    assert all(t.dtype == dtypes.float32 for t in scales)
    parts = [split.values, *scales]
    widened = sum(t.numel() * 2 for t in scales)  # float16 -> float32
    assert sum(t.numel() * t.dtype.itemsize for t in parts) == raw.numel() + widened
    np.testing.assert_array_equal(split.dequantize().numpy(), expected[name])
    x = np.random.default_rng(2).standard_normal((2, SHAPE[1])).astype(np.float32)
    got = split.linear(Tensor(x)).numpy()
    np.testing.assert_allclose(got, x @ expected[name].T, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("name", ["Q4_0", "Q4_1", "Q8_0"])
@pytest.mark.parametrize("rows", [24, 12, 6])
def test_values_of_several_rows_share_a_word_and_others_stay_bytes(name, rows):
    """``split_blocks`` packs the values of 8 rows of nibbles (a word per plane) or 4 rows of
    bytes into each int32 word where the row count allows (24; 12 for bytes), else keeps bytes:
    each dequantizes bit for bit as gguf does (the top field's nibbles of 8 and more, which
    would be negative read in place, and Q8_0's negative bytes too), and the decode product is
    one kernel equal to the dequantized matmul's."""
    from fusegrad.nn.gguf import WORD_ROWS

    weights = np.random.default_rng(3).standard_normal((rows, 96)).astype(np.float32)
    weights[:, :8] = np.linspace(-1, 1, 8)  # every nibble value in the first block of each row
    raw = gguf.quants.quantize(weights, Q[name])
    split = split_blocks(Tensor(raw), Q[name].value, (rows, 96))
    assert split is not None
    word = WORD_ROWS[8 if name == "Q8_0" else 4]
    packed = word if rows % word == 0 else 1
    planes, width = (1, 32) if name == "Q8_0" else (2, 16)
    narrow = dtypes.int8 if name == "Q8_0" else dtypes.uint8
    assert split.rows == packed
    if packed > 1:
        assert split.values.shape == (rows // packed, 3, planes, width)
        assert split.values.dtype == dtypes.int32
    else:
        assert split.values.shape == (rows, 3, width) and split.values.dtype == narrow
    expected = gguf.quants.dequantize(raw, Q[name])
    np.testing.assert_array_equal(split.dequantize().numpy(), expected)
    x = np.random.default_rng(4).standard_normal((2, 96)).astype(np.float32)
    out = split.linear(Tensor(x))
    assert len(out.schedule()) == 1
    np.testing.assert_allclose(out.numpy(), x @ expected.T, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("name", [n for n in TYPES if n not in ("F32", "F16", "BF16")])
def test_decoding_each_blocks_scales_once_gives_the_same_bits(written, name):
    path, expected = written
    _, tensors = gguf_load(path, packed=True)
    raw, kind, shape = tensors[name]
    got = dequantize(raw, kind, shape, block_scales=True).contiguous().numpy()
    np.testing.assert_array_equal(got, expected[name])


@pytest.mark.parametrize("name", ["Q4_1", "Q8_0", "Q6_K"])
def test_a_matmul_with_a_quantized_weight_is_one_kernel_reading_its_bytes(written, name):
    path, expected = written
    _, tensors = gguf_load(path)
    x = Tensor(np.ones((1, SHAPE[1]), np.float32)).realize()
    out = x @ tensors[name].T
    kernels = out.schedule()
    assert len(kernels) == 1
    params = [u.dtype for u in kernels[0].ast.toposort() if u.op.name == "PARAM"]
    assert dtypes.uint8 in params
    np.testing.assert_allclose(out.numpy(), expected[name].sum(1)[None], rtol=1e-5, atol=1e-3)


def test_a_truncated_file_is_a_clear_error(written, tmp_path):
    path, _ = written
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:300])
    with pytest.raises(FileFormatError, match="not a readable GGUF file"):
        gguf_load(cut)


def test_a_file_of_another_format_is_a_clear_error(tmp_path):
    other = tmp_path / "model.safetensors"
    other.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      " + bytes(64))
    with pytest.raises(FileFormatError, match="not a readable GGUF file"):
        gguf_load(other)


def test_the_metadata_reads_as_the_gguf_package_reads_it(written):
    path, _ = written
    reader = gguf.GGUFReader(str(path))
    expected = {}
    for key, field in reader.fields.items():
        if not key.startswith("GGUF."):
            value = field.contents()
            expected[key] = value.tolist() if isinstance(value, np.ndarray) else value
    assert gguf_metadata(path) == expected
    _, tensors = gguf_load(path, packed=True)
    assert {name: shape for name, (_, _, shape) in tensors.items()} == {
        t.name: tuple(reversed(t.shape.tolist())) for t in reader.tensors
    }


def test_every_half_precision_scale_decodes_exactly_without_float16():
    bits = np.arange(1 << 16, dtype=np.uint32)
    got = _half_to_float(Tensor(bits)).numpy()
    expected = bits.astype(np.uint16).view(np.float16).astype(np.float32)
    nan = np.isnan(expected)
    np.testing.assert_array_equal(got.view(np.uint32)[~nan], expected.view(np.uint32)[~nan])
    assert np.isnan(got[nan]).all()


def test_a_row_range_of_split_blocks_is_those_rows():
    """``SplitBlocks.row_range`` (a prompt's GEMM per part of a joined weight): the rows of the
    whole, as views; a range that splits a word's rows is refused."""
    from fusegrad.errors import InvalidValue

    weights = np.random.default_rng(5).standard_normal((16, 64)).astype(np.float32)
    raw = gguf.quants.quantize(weights, Q.Q4_1)
    split = split_blocks(Tensor(raw), Q.Q4_1.value, (16, 64))
    part = split.row_range(8, 16)
    assert part.shape == (8, 64) and part.values.shape == (1, 2, 2, 16)
    whole = gguf.quants.dequantize(raw, Q.Q4_1)
    np.testing.assert_array_equal(part.dequantize(contiguous=True).numpy(), whole[8:16])
    with pytest.raises(InvalidValue, match="split the words of 8 rows"):
        split.row_range(4, 16)


def _plans_near(ast, renderer) -> list:
    """The heuristic's plan for ``ast``, BEAM's neighbours of it, and theirs (two changes away)."""
    from fusegrad.codegen import search
    from fusegrad.codegen.opt import heuristic_opts

    base = heuristic_opts(ast, renderer)
    near = [base, *search._neighbours(base, ast)]
    return list(dict.fromkeys(near + [n for o in near[1:] for n in search._neighbours(o, ast)]))


@pytest.mark.parametrize("name, tokens", [("Q4_1", 1), ("Q8_0", 3)])
def test_every_plan_near_the_decode_product_computes_it(name, tokens, monkeypatch):
    """The word product of split blocks under every loop plan BEAM may try two changes from the
    heuristic's, and the tiled ones that once gave garbage on a (144, 4) output (upcast rows and
    words, lanes, a panel tile): each equals numpy's product with the dequantized weight."""
    import fusegrad
    from fusegrad import Device
    from fusegrad.codegen import kernel
    from fusegrad.codegen.opt import KernelOpts, _reduce_of

    rng = np.random.default_rng(5)
    raw = gguf.quants.quantize(rng.standard_normal((576, 576)).astype(np.float32), Q[name])
    split = split_blocks(Tensor(raw), Q[name].value, (576, 576))
    x = Tensor(rng.standard_normal((tokens, 576)).astype(np.float32)).realize()
    want = x.numpy() @ gguf.quants.dequantize(raw, Q[name]).T
    *_, step = split.linear(x).schedule()
    shape = step.ast.src[0].src[1].shape
    lane = max(_reduce_of(step.ast.src[0].src[1]).arg[1])
    words, rows = shape.index(576 // split.rows), shape.index(split.rows)
    plans = _plans_near(step.ast, Device["CPU"].renderer)
    for ups in (((rows, 2), (words, 8)), ((rows, 4), (words, 8)), ((rows, split.rows), (words, 4))):
        order = tuple(d for d in range(len(shape)) if d not in dict(ups)) + (rows, words)
        plans += [KernelOpts(order, ups, (lane, 16), False, tile) for tile in ((), ((words, 2),))]
    chosen = kernel.heuristic_opts
    assert len(plans) > 20
    for plan in plans:
        monkeypatch.setattr(
            kernel,
            "heuristic_opts",
            lambda ast, r, p=plan: p if ast == step.ast else chosen(ast, r),
        )
        fusegrad.reset_caches()
        got = split.linear(x).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3, err_msg=str(plan))
