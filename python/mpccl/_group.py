"""Groups: calls between group_start() and group_end() are collected and
launched together (needed for p2p patterns such as a ring of send/recv)."""

import contextlib

from . import _lib


def group_start():
    _lib.call("ncclGroupStart")


def group_end():
    _lib.call("ncclGroupEnd")


@contextlib.contextmanager
def group():
    """with mpccl.group(): ... -- ncclGroupStart on entry, ncclGroupEnd on exit
    (also when the body raises, so the library's group depth stays balanced;
    the body's exception wins over a group_end error)."""
    group_start()
    try:
        yield
    except BaseException:
        try:
            group_end()
        except Exception:
            pass
        raise
    group_end()
