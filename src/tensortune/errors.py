"""The one exception type users see for bad input."""


class TensortuneError(Exception):
    """A problem with what the user asked for (bad shape, unknown workload, bad storage, ...).

    The CLI prints its message as a single line and exits with status 2; nothing is written
    before it is raised.
    """
