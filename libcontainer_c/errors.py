"""The one exception the C helper's wrappers raise."""
import os


class ContainerFsError(OSError):
    """A filesystem or mount operation on a container failed.

    An ``OSError`` (so ``errno``, ``strerror`` and ``filename`` work as usual) that also names the
    operation that failed: ``str(err)`` reads ``mkdir -p: [Errno 20] Not a directory: '/usr/lib'``.
    ``filename`` is the path as the caller gave it (a container path for rootfs operations).
    """

    def __init__(self, errno: int, operation: str, path=None):
        super().__init__(errno, os.strerror(errno), os.fsdecode(path) if path is not None else None)
        self.operation = operation

    def __str__(self) -> str:
        return f"{self.operation}: {super().__str__()}"

    def __reduce__(self):
        return (type(self), (self.errno, self.operation, self.filename))
