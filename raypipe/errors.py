"""Project exceptions. Raised with the file, row id and field; caught only at job boundaries (cli)."""

from __future__ import annotations


class RaypipeError(Exception):
    """Base of every error a job reports to the user without a traceback."""


class ConfigError(RaypipeError):
    """A config file or override that does not validate; the message names the key path and file."""


class DataError(RaypipeError):
    """Bad input data. Carries where it was found so the user can fix the row."""

    def __init__(self, message: str, *, file: str | None = None, row_id: str | None = None,
                 field: str | None = None):
        self.file, self.row_id, self.field = file, row_id, field
        where = ", ".join(
            f"{k}={v!r}" for k, v in (("file", file), ("id", row_id), ("field", field)) if v is not None
        )
        super().__init__(f"{message} ({where})" if where else message)


class ModelError(RaypipeError):
    """A model folder that cannot be loaded or does not match what the config expects."""


class IndexMismatchError(RaypipeError):
    """A faiss index whose manifest disagrees with the configured encoder."""


class DiskFullError(RaypipeError):
    """A write that found its filesystem full (ENOSPC) or the user's quota spent (EDQUOT).

    Raised by `raypipe.disk` at the write that failed, so the message names that path; the writers
    remove their temp files and write a job's done-markers last, so a rerun after space is freed
    redoes only what was not finished.
    """

    def __init__(self, path: str):
        self.path = str(path)
        super().__init__(f"no space left on the disk to write {self.path} (the disk is full or the quota is "
                         "spent): nothing half-written was kept; free space there and rerun the same command, "
                         "which resumes where this run stopped")

    def __reduce__(self) -> tuple[type, tuple[str]]:
        # Ray carries a worker's exception to the driver by pickling it: rebuild from the path, not the message
        return type(self), (self.path,)
