"""The typed exceptions a user can meet. Each message says what was wrong and how to fix it."""


class FusegradError(Exception):
    """Base class of every error fusegrad raises on purpose."""


class ShapeError(FusegradError, ValueError, RuntimeError):
    """Shapes that do not fit the operation (broadcasting, reshape, axes): a ValueError, and a
    RuntimeError too, as PyTorch raises for the same mistakes (``except RuntimeError`` ports)."""


class InvalidIndex(FusegradError, IndexError):
    """An axis (dim) or an index a tensor does not have (out of range, ragged, of a type that
    cannot index): an IndexError, as PyTorch raises."""


class DTypeError(FusegradError, TypeError):
    """An unknown dtype, or one a device cannot hold."""


class DeviceNotFound(FusegradError, LookupError):
    """No installed and available backend provides the requested device."""


class DeviceUnavailable(FusegradError, RuntimeError):
    """The device exists but cannot be used on this machine (its probe says why)."""


class InvalidArgument(FusegradError, RuntimeError):
    """An argument an op does not define a result for (an unknown reduction name, an integer
    tensor to a negative power): a RuntimeError, as PyTorch raises for the same call."""


class InvalidValue(InvalidArgument, ValueError):
    """A number outside the range an op accepts (a probability above 1, a negative variance): a
    ValueError, and a RuntimeError too, as PyTorch raises one of these for each."""


class InvalidType(FusegradError, TypeError):
    """An argument of the wrong Python type (a float size, a device that is not a string): a
    TypeError, as PyTorch raises for the same call."""


class UnknownOption(FusegradError, ValueError, NotImplementedError):
    """A name an op does not know (a reduction, a padding or rounding mode): a ValueError, and a
    NotImplementedError (so a RuntimeError) too, as PyTorch raises one of these for each."""


class UnsupportedOp(FusegradError, NotImplementedError):
    """The device cannot run an op or dtype; nothing falls back silently."""


class CompileError(FusegradError, RuntimeError):
    """A kernel failed to compile; the message holds the source and the compiler's output."""


class PluginError(FusegradError, RuntimeError):
    """A plugin is broken or was built for another backend API version."""


class StateDictError(FusegradError, ValueError):
    """A state dict does not fit a model: missing, unexpected or wrongly shaped entries."""


class FileFormatError(FusegradError, ValueError):
    """A file (safetensors, PyTorch checkpoint, IDX data) is truncated, corrupted or of another
    format."""


class UnsafePickleError(FileFormatError):
    """A pickle asked for a global that a tensor loader has no reason to run; nothing was run."""


class DatasetNotFound(FusegradError, FileNotFoundError):
    """A dataset's files are not where they were looked for, and were not downloaded."""


class DownloadError(FusegradError, OSError):
    """A download failed, was cut short or did not match its checksum; nothing was cached."""


class KernelVerifyError(FusegradError, RuntimeError):
    """A generated kernel would divide by zero, leave a buffer or use an undeclared dtype; it was
    refused before compiling (codegen/verify.py). A bug in code generation, never the user's."""


class SpecError(FusegradError, RuntimeError):
    """A pass built a UOp its stage does not allow (a stray op, mismatched dtypes, a wrong arg);
    caught when it was built (uop/spec.py). A bug in code generation, never the user's."""


class JitError(FusegradError, RuntimeError):
    """A function TinyJit cannot capture (jit.py); the message says why and what to do."""
