"""The one exception type users see for bad input."""


class TensortuneError(Exception):
    """A problem with what the user asked for (bad shape, unknown workload, bad storage, ...).

    The CLI prints its message as a single line and exits with status 2; nothing is written
    before it is raised.
    """


def last_line(err: BaseException, fallback: str | None = None) -> str:
    """The last non-empty line of `err`'s message (TVM puts its reason there, under a
    traceback), or `fallback` (default None: the error's type name) for an empty message."""
    lines = [line for line in str(err).strip().splitlines() if line.strip()]
    return lines[-1] if lines else (fallback or type(err).__name__)
