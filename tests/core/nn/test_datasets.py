"""MNIST loading: IDX parsing, folder resolution, checksums, and downloads from a local server."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import os
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import fusegrad.progress
from fusegrad import dtypes
from fusegrad.errors import DatasetNotFound, DownloadError, FileFormatError
from fusegrad.nn import datasets
from fusegrad.nn.datasets import MNIST_FILES, mnist, parse_idx


def idx(array: np.ndarray, code: int = 0x08) -> bytes:
    """``array`` as IDX bytes."""
    big = array.astype(array.dtype.newbyteorder(">"))
    return (
        bytes([0, 0, code, array.ndim])
        + struct.pack(f">{array.ndim}I", *array.shape)
        + big.tobytes()
    )


def fake_mnist(n_train: int = 5, n_test: int = 3) -> dict[str, bytes]:
    """Small, distinct IDX payloads for the four MNIST files."""
    rng = np.random.default_rng(0)
    return {
        "train-images-idx3-ubyte": idx(rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8)),
        "train-labels-idx1-ubyte": idx(rng.integers(0, 10, n_train, dtype=np.uint8)),
        "t10k-images-idx3-ubyte": idx(rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8)),
        "t10k-labels-idx1-ubyte": idx(rng.integers(0, 10, n_test, dtype=np.uint8)),
    }


@pytest.fixture
def payloads(monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    """Fake MNIST contents, whose checksums replace the real ones; no environment leaks in."""
    files = fake_mnist()
    monkeypatch.setattr(
        datasets, "MNIST_SHA256", {k: hashlib.sha256(v).hexdigest() for k, v in files.items()}
    )
    monkeypatch.delenv("FUSEGRAD_DATA", raising=False)
    return files


def write(folder: Path, files: dict[str, bytes], gz: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        if gz:
            (folder / f"{name}.gz").write_bytes(gzip.compress(data))
        else:
            (folder / name).write_bytes(data)
    return folder


def expected(files: dict[str, bytes], name: str) -> np.ndarray:
    return parse_idx(files[name])


def check(result: tuple, files: dict[str, bytes]) -> None:
    x_train, y_train, x_test, y_test = result
    assert x_train.shape == (5, 1, 28, 28) and x_train.dtype == dtypes.uint8
    assert y_train.shape == (5,) and y_train.dtype == dtypes.uint8
    assert x_test.shape == (3, 1, 28, 28) and y_test.shape == (3,)
    np.testing.assert_array_equal(x_train.numpy()[:, 0], expected(files, "train-images-idx3-ubyte"))
    np.testing.assert_array_equal(y_test.numpy(), expected(files, "t10k-labels-idx1-ubyte"))


# ---- IDX -----------------------------------------------------------------------------------------


def test_parse_idx_reads_big_endian_values_of_each_type():
    floats = np.array([[1.5, -2.0], [3.25, 0.0]], np.float32)
    np.testing.assert_array_equal(parse_idx(idx(floats, 0x0D)), floats)
    ints = np.array([1, -70000, 2**31 - 1], np.int32)
    np.testing.assert_array_equal(parse_idx(idx(ints, 0x0C)), ints)
    assert parse_idx(idx(ints, 0x0C)).dtype == np.int32


@pytest.mark.parametrize(
    "data, message",
    [
        (b"\x00\x00\x07\x01" + b"\0" * 8, "bad IDX magic '00000701'"),
        (b"PK\x03\x04", "bad IDX magic"),
        (b"\x00\x00\x08\x03\x00\x00", r"truncated IDX header \(6 bytes, needs 16\)"),
        (
            idx(np.zeros((2, 3), np.uint8))[:-1],
            r"IDX data is truncated: 5 bytes for shape \(2, 3\)",
        ),
        (idx(np.zeros(2, np.uint8)) + b"\0", "longer than its header says"),
    ],
)
def test_parse_idx_names_bad_files(data, message):
    with pytest.raises(FileFormatError, match=message):
        parse_idx(data, "f.idx")


# ---- local folders -------------------------------------------------------------------------------


def test_mnist_from_a_folder_gzipped_or_not(tmp_path, payloads, device):
    check(mnist(write(tmp_path / "gz", payloads), device=device), payloads)
    plain = mnist(write(tmp_path / "plain", payloads, gz=False), device=device)
    check(plain, payloads)
    assert plain[0].device == device


def test_mnist_from_fusegrad_data_or_its_mnist_subfolder(tmp_path, payloads, monkeypatch):
    monkeypatch.setenv("FUSEGRAD_DATA", str(write(tmp_path / "flat", payloads)))
    check(mnist(), payloads)
    write(tmp_path / "root" / "mnist", payloads)
    monkeypatch.setenv("FUSEGRAD_DATA", str(tmp_path / "root"))
    check(mnist(), payloads)


def test_regzipped_copies_pass_because_the_content_is_checked(tmp_path, payloads):
    folder = write(tmp_path, payloads)
    for name, data in payloads.items():
        (folder / f"{name}.gz").write_bytes(gzip.compress(data, compresslevel=1, mtime=12345))
    check(mnist(folder), payloads)


def test_changed_content_fails_its_checksum(tmp_path, payloads):
    folder = write(tmp_path, payloads)
    bad = bytearray(payloads["t10k-labels-idx1-ubyte"])
    bad[-1] ^= 1
    (folder / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(bytes(bad)))
    with pytest.raises(
        FileFormatError, match="t10k-labels-idx1-ubyte.gz: decompressed content has sha256"
    ):
        mnist(folder)


def test_broken_gzip_is_named(tmp_path, payloads):
    folder = write(tmp_path, payloads)
    path = folder / "train-labels-idx1-ubyte.gz"
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(
        FileFormatError, match="train-labels-idx1-ubyte.gz is not a valid gzip file"
    ):
        mnist(folder)


def test_images_and_labels_must_agree_in_number(tmp_path, payloads, monkeypatch):
    files = {**payloads, "train-labels-idx1-ubyte": idx(np.zeros(4, np.uint8))}
    monkeypatch.setitem(
        datasets.MNIST_SHA256,
        "train-labels-idx1-ubyte",
        hashlib.sha256(files["train-labels-idx1-ubyte"]).hexdigest(),
    )
    with pytest.raises(FileFormatError, match="5 images but 4 labels"):
        mnist(write(tmp_path, files))


def test_missing_files_are_an_error_or_none_when_partial(tmp_path, payloads):
    test_only = {k: v for k, v in payloads.items() if k.startswith("t10k")}
    folder = write(tmp_path, test_only)
    with pytest.raises(DatasetNotFound, match="train-images-idx3-ubyte, train-labels-idx1-ubyte"):
        mnist(folder)
    with pytest.warns(UserWarning, match="returning None"):
        x_train, y_train, x_test, y_test = mnist(folder, allow_partial=True)
    assert x_train is None and y_train is None
    assert x_test.shape == (3, 1, 28, 28) and y_test.shape == (3,)


# ---- downloads -----------------------------------------------------------------------------------


class Server:
    """A web server on 127.0.0.1 serving ``files``; ``short`` names files it cuts off midway."""

    def __init__(self, files: dict[str, bytes]):
        self.files, self.short, self.requests = files, set(), []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                name = self.path.rsplit("/", 1)[-1]
                server.requests.append(name)
                if name not in server.files:
                    self.send_error(404)
                    return
                body = server.files[name]
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2] if name in server.short else body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/mnist/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def server(payloads, monkeypatch, tmp_path) -> Iterator[Server]:
    """A local mirror of the fake files, used by mnist() with the cache under ``tmp_path``."""
    gz = {f"{k}.gz": gzip.compress(v) for k, v in payloads.items()}
    s = Server(gz)
    monkeypatch.setattr(datasets, "MNIST_URL", s.url)
    monkeypatch.setattr(
        datasets, "MNIST_GZ_MD5", {k: hashlib.md5(gz[f"{k}.gz"]).hexdigest() for k in payloads}
    )
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


def cached(tmp_path: Path) -> list[str]:
    folder = tmp_path / "cache" / "fusegrad" / "datasets" / "mnist"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_download_once_into_the_cache_with_progress(
    server, payloads, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("PROGRESS", "1")  # stderr is not a terminal here: bars are forced on
    monkeypatch.setattr(fusegrad.progress, "_tqdm", lambda *args: None)  # the plain bar
    check(mnist(), payloads)
    assert sorted(server.requests) == sorted(f"{n}.gz" for n in MNIST_FILES)
    assert cached(tmp_path) == sorted(f"{n}.gz" for n in MNIST_FILES)
    assert "100%" in capsys.readouterr().err
    check(mnist(), payloads)
    assert len(server.requests) == 4  # the second call read the cache


def test_corrupted_download_is_rejected_and_not_cached(server, payloads, tmp_path):
    name = "train-labels-idx1-ubyte.gz"
    server.files[name] = server.files[name][:-1] + b"!"
    with pytest.raises(DownloadError, match=f"{name} has md5 .*, expected"):
        mnist()
    assert name not in cached(tmp_path)
    assert not [n for n in cached(tmp_path) if n.endswith(".part")]


def test_truncated_download_is_rejected_and_not_cached(server, tmp_path):
    server.short.add("t10k-images-idx3-ubyte.gz")
    with pytest.raises(DownloadError, match="stopped after .* bytes"):
        mnist()
    assert "t10k-images-idx3-ubyte.gz" not in cached(tmp_path)
    assert not [n for n in cached(tmp_path) if n.endswith(".part")]


def test_unreachable_mirror_is_a_download_error(server, tmp_path):
    del server.files["t10k-labels-idx1-ubyte.gz"]
    with pytest.raises(DownloadError, match="could not download .*t10k-labels.*404"):
        mnist()
    assert "t10k-labels-idx1-ubyte.gz" not in cached(tmp_path)


def test_mnist_example_names_its_data_flag_when_the_download_fails(tmp_path):
    """examples/mnist.py, with no network (a proxy that refuses): its error says --data DIR."""
    env = {k: v for k, v in os.environ.items() if k not in ("FUSEGRAD_DATA", "NO_PROXY")}
    proxy = "http://127.0.0.1:9"  # the discard port: nothing listens, the connection is refused
    env |= {"XDG_CACHE_HOME": str(tmp_path), "https_proxy": proxy, "http_proxy": proxy}
    env |= {"no_proxy": "", "DEV": "PYTHON"}
    example = Path(__file__).parents[3] / "examples" / "mnist.py"
    done = subprocess.run(
        [sys.executable, str(example), "--steps", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 1
    assert "could not download" in done.stderr and "--data DIR" in done.stderr
    assert "Traceback" not in done.stderr
