"""The Communicator: creation (unique id, MPI), lifecycle, collectives,
point-to-point, one-sided and resources, in the shape of nccl4py's nccl.core."""

import ctypes

from . import _lib, errors
from .buffers import resolve
from .streams import stream_handle
from .types import NcclDataType, NcclScalarResidence, WindowFlag, gin_type
from .resources import (CustomRedOp, DevCommRequirements, DevCommResource, RegisteredBufferHandle,
                        RegisteredWindowHandle)

SPLIT_NOCOLOR = -1


class UniqueId:
    """An ncclUniqueId: 128 opaque bytes.  Picklable, so mpi4py's bcast can
    hand it to the other ranks."""

    __slots__ = ("_bytes",)

    def __init__(self, data=None):
        data = bytes(_lib.UNIQUE_ID_BYTES) if data is None else bytes(data)
        if len(data) != _lib.UNIQUE_ID_BYTES:
            raise errors.invalid_argument("a unique id is %d bytes, got %d"
                                          % (_lib.UNIQUE_ID_BYTES, len(data)))
        self._bytes = data

    def as_bytes(self):
        return self._bytes

    def __bytes__(self):
        return self._bytes

    def __eq__(self, other):
        return isinstance(other, UniqueId) and other._bytes == self._bytes

    def __hash__(self):
        return hash(self._bytes)

    def __reduce__(self):
        return (UniqueId, (self._bytes,))

    def _struct(self):
        s = _lib.UniqueIdStruct()
        ctypes.memmove(ctypes.addressof(s), self._bytes, _lib.UNIQUE_ID_BYTES)
        return s


def get_unique_id():
    """A fresh id: call on one rank, share with the others, pass to init()."""
    s = _lib.UniqueIdStruct()
    _lib.call("ncclGetUniqueId", ctypes.byref(s))
    return UniqueId(ctypes.string_at(ctypes.addressof(s), _lib.UNIQUE_ID_BYTES))


class NCCLConfig:
    """ncclConfig_t.  Fields left at None keep the library's default."""

    _FIELDS = {
        "blocking": "blocking", "cga_cluster_size": "cgaClusterSize", "min_ctas": "minCTAs",
        "max_ctas": "maxCTAs", "net_name": "netName", "split_share": "splitShare",
        "traffic_class": "trafficClass", "comm_name": "commName",
        "collnet_enable": "collnetEnable", "cta_policy": "CTAPolicy",
        "shrink_share": "shrinkShare", "nvls_ctas": "nvlsCTAs",
        "n_channels_per_net_peer": "nChannelsPerNetPeer",
        "nvlink_centric_sched": "nvlinkCentricSched", "graph_usage_mode": "graphUsageMode",
        "num_rma_ctx": "numRmaCtx",
    }

    def __init__(self, **fields):
        for key in fields:
            if key not in self._FIELDS:
                raise errors.invalid_argument("unknown config field %r (known: %s)"
                                              % (key, ", ".join(sorted(self._FIELDS))))
        self.fields = dict(fields)

    def _struct(self):
        s = _lib.ConfigStruct()
        s.size = ctypes.sizeof(s)
        s.magic = _lib.API_MAGIC
        s.version = _lib.HEADER_VERSION
        for name, _ in s._fields_[3:]:
            if name not in ("netName", "commName"):
                setattr(s, name, _lib.CONFIG_UNDEF_INT)
        keep = []
        for key, value in self.fields.items():
            if value is None:
                continue
            cname = self._FIELDS[key]
            if cname in ("netName", "commName"):
                raw = value.encode() if isinstance(value, str) else bytes(value)
                keep.append(raw)
                setattr(s, cname, raw)
            else:
                setattr(s, cname, int(value))
        return s, keep


def _config_arg(config):
    """None / dict / NCCLConfig -> (pointer or None, keepalive)."""
    if config is None:
        return None, None
    if isinstance(config, dict):
        config = NCCLConfig(**config)
    if not isinstance(config, NCCLConfig):
        raise errors.invalid_argument("config of type %s: expected NCCLConfig, a dict or None"
                                      % type(config).__name__)
    s, keep = config._struct()
    return ctypes.byref(s), (s, keep)


class _MpiOob:
    """mpcclOobOps_t over an mpi4py communicator.  The callbacks run a dup of
    the user's communicator, so bootstrap traffic never mixes with theirs; the
    ctypes thunks and this object stay referenced in _LIVE until the library
    calls release (at destroy/abort), which also frees the dup."""

    _LIVE = {}
    _next_key = 1

    def __init__(self, mpi_comm):
        from mpi4py import MPI
        self.MPI = MPI
        self.comm = mpi_comm.Dup()
        self.error = None
        self.ops = _lib.OobOpsStruct(_lib.OOB_ALLGATHER(self._allgather),
                                     _lib.OOB_BARRIER(self._barrier),
                                     _lib.OOB_RELEASE(self._release))
        self.key = _MpiOob._next_key
        _MpiOob._next_key += 1
        _MpiOob._LIVE[self.key] = self

    def _allgather(self, ctx, sendbuf, recvbuf, nbytes):
        try:
            # A copy: sendbuf may be this rank's own slot of recvbuf.
            mine = ctypes.string_at(sendbuf, nbytes)
            total = nbytes * self.comm.Get_size()
            out = (ctypes.c_char * total).from_address(recvbuf)
            self.comm.Allgather([mine, self.MPI.BYTE], [out, self.MPI.BYTE])
            return 0
        except BaseException as exc:  # an exception must not cross the C frame
            self.error = exc
            return 1

    def _barrier(self, ctx):
        try:
            self.comm.Barrier()
            return 0
        except BaseException as exc:
            self.error = exc
            return 1

    def _release(self, ctx):
        _MpiOob._LIVE.pop(self.key, None)
        try:
            if self.comm is not None and not self.MPI.Is_finalized():
                self.comm.Free()
        except BaseException as exc:
            self.error = exc
        self.comm = None


def _root_arg(root, nranks, what="root"):
    if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < nranks:
        raise errors.invalid_argument("%s = %r: expected a rank in [0, %d)" % (what, root, nranks))
    return root


class Communicator:
    """An mpccl communicator.  Communicator(0) is a null communicator (what
    split() returns on ranks that join no new communicator)."""

    def __init__(self, ptr=0):
        self._ptr = int(ptr or 0)
        self._resources = []
        self._oob = None
        self._nranks = self._rank = self._device = None

    # ---- creation --------------------------------------------------------------

    @classmethod
    def init(cls, nranks, rank, unique_id, config=None):
        """Collective over nranks processes sharing unique_id (get_unique_id)."""
        if not isinstance(unique_id, UniqueId):
            unique_id = UniqueId(unique_id)
        out = ctypes.c_void_p()
        cfg, keep = _config_arg(config)
        _lib.call("ncclCommInitRankConfig", ctypes.byref(out), int(nranks), unique_id._struct(),
                  int(rank), cfg)
        return cls(out.value)

    @classmethod
    def from_mpi(cls, mpi_comm, config=None):
        """Collective over mpi_comm (an mpi4py communicator): one rank per process,
        ranks as in mpi_comm, bootstrapped over MPI (no unique id needed)."""
        oob = _MpiOob(mpi_comm)
        out = ctypes.c_void_p()
        cfg, keep = _config_arg(config)
        try:
            _lib.call("mpcclCommInitOob", ctypes.byref(out), mpi_comm.Get_size(),
                      mpi_comm.Get_rank(), ctypes.byref(oob.ops), None, cfg)
        except errors.NcclError as exc:
            if oob.key in _MpiOob._LIVE:  # the library never took ownership
                oob._release(None)
            if oob.error is not None:
                raise exc from oob.error
            raise
        comm = cls(out.value)
        comm._oob = oob
        return comm

    def split(self, color, key, config=None):
        """ncclCommSplit: collective; color SPLIT_NOCOLOR (-1) joins nothing and
        gets a null Communicator."""
        self._require("split")
        out = ctypes.c_void_p()
        cfg, keep = _config_arg(config)
        _lib.call("ncclCommSplit", self._ptr, int(color), int(key), ctypes.byref(out), cfg,
                  comm_ptr=self._ptr)
        return Communicator(out.value)

    def shrink(self, exclude_ranks, config=None, flags=0):
        """ncclCommShrink: a communicator of every rank but exclude_ranks, in the
        same order.  Called by the ranks that stay only (the excluded ones may
        be dead); flags: CommShrinkFlag."""
        self._require("shrink")
        ranks = [int(r) for r in exclude_ranks]
        arr = (ctypes.c_int * max(1, len(ranks)))(*ranks)
        out = ctypes.c_void_p()
        cfg, keep = _config_arg(config)
        _lib.call("ncclCommShrink", self._ptr, arr if ranks else None, len(ranks), ctypes.byref(out), cfg,
                  int(flags), comm_ptr=self._ptr)
        return Communicator(out.value)

    def revoke(self, flags=0):
        """ncclCommRevoke (local): the communicator takes no more work; shrink,
        queries and teardown remain.  Host communicators only for now."""
        self._require("revoke")
        _lib.call("ncclCommRevoke", self._ptr, int(flags), comm_ptr=self._ptr)

    def suspend(self, flags=1):
        """ncclCommSuspend (flags: 1 = NCCL_SUSPEND_MEM): no work until resume().
        Host communicators only for now."""
        self._require("suspend")
        _lib.call("ncclCommSuspend", self._ptr, int(flags), comm_ptr=self._ptr)

    def resume(self):
        self._require("resume")
        _lib.call("ncclCommResume", self._ptr, comm_ptr=self._ptr)

    def mem_stats(self, stat):
        """ncclCommMemStats: 0 GpuMemSuspend, 1 GpuMemSuspended, 2 GpuMemPersist,
        3 GpuMemTotal (bytes of device memory the communicator holds)."""
        self._require("mem_stats")
        out = ctypes.c_uint64()
        _lib.call("ncclCommMemStats", self._ptr, int(stat), ctypes.byref(out), comm_ptr=self._ptr)
        return out.value

    def get_unique_id(self):
        """ncclCommGetUniqueId: the id of a grow, made on one existing rank (the
        coordinator) and handed to the new ranks."""
        self._require("get_unique_id")
        s = _lib.UniqueIdStruct()
        _lib.call("ncclCommGetUniqueId", self._ptr, ctypes.byref(s), comm_ptr=self._ptr)
        return UniqueId(ctypes.string_at(ctypes.addressof(s), _lib.UNIQUE_ID_BYTES))

    def grow(self, nranks, unique_id=None, config=None):
        """ncclCommGrow on an existing rank (it keeps its rank): the coordinator
        passes the id from get_unique_id(), the others None.  New ranks call
        Communicator.join_grow()."""
        self._require("grow")
        out = ctypes.c_void_p()
        cfg, keep = _config_arg(config)
        ident = None
        if unique_id is not None:
            ident = (unique_id if isinstance(unique_id, UniqueId) else UniqueId(unique_id))._struct()
        _lib.call("ncclCommGrow", self._ptr, int(nranks), ctypes.byref(ident) if ident is not None else None, -1,
                  ctypes.byref(out), cfg, comm_ptr=self._ptr)
        return Communicator(out.value)

    @classmethod
    def join_grow(cls, nranks, rank, unique_id, config=None):
        """ncclCommGrow on a new rank (comm NULL): joins the grown communicator
        as `rank` (at least the old size) with the coordinator's id."""
        ident = (unique_id if isinstance(unique_id, UniqueId) else UniqueId(unique_id))._struct()
        out = ctypes.c_void_p()
        cfg, keep = _config_arg(config)
        _lib.call("ncclCommGrow", None, int(nranks), ctypes.byref(ident), int(rank), ctypes.byref(out), cfg)
        return cls(out.value)

    # ---- lifecycle ---------------------------------------------------------------

    @property
    def ptr(self):
        return self._ptr

    @property
    def is_valid(self):
        return self._ptr != 0

    def _require(self, what):
        if not self._ptr:
            raise errors.invalid_usage("%s: the communicator is not initialized (null, destroyed "
                                       "or aborted)" % what)
        return self._ptr

    def _track(self, res):
        self._resources.append(res)

    def _forget(self, res):
        try:
            self._resources.remove(res)
        except ValueError:
            pass

    @property
    def resources(self):
        """The live resources this communicator tracks."""
        return list(self._resources)

    def close_all_resources(self):
        """Closes every tracked resource, newest first; best effort (errors
        are ignored so that teardown always completes).  Idempotent."""
        for res in reversed(list(self._resources)):
            try:
                res.close()
            except Exception:
                pass
        self._resources.clear()

    def finalize(self):
        self._require("finalize")
        _lib.call("ncclCommFinalize", self._ptr, comm_ptr=self._ptr)

    def destroy(self):
        """Closes the resources, then frees the communicator.  A null or already
        destroyed communicator is left as is."""
        if not self._ptr:
            return
        self.close_all_resources()
        ptr, self._ptr = self._ptr, 0
        _lib.call("ncclCommDestroy", ptr, comm_ptr=ptr)

    def abort(self):
        """Frees the communicator without waiting for pending work; its
        resources become invalid (the library reclaims them)."""
        if not self._ptr:
            return
        for res in list(self._resources):
            res._invalidate()
        self._resources.clear()
        ptr, self._ptr = self._ptr, 0
        _lib.call("ncclCommAbort", ptr, comm_ptr=ptr)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.destroy()
        else:
            self.abort()  # peers may be gone: do not wait for them
        return False

    def get_last_error(self):
        self._require("get_last_error")
        return _lib.last_error(self._ptr)

    def get_async_error(self):
        self._require("get_async_error")
        out = ctypes.c_int()
        _lib.call("ncclCommGetAsyncError", self._ptr, ctypes.byref(out), comm_ptr=self._ptr)
        return out.value

    # ---- properties ----------------------------------------------------------------

    def _query_int(self, fn, what):
        self._require(what)
        out = ctypes.c_int()
        _lib.call(fn, self._ptr, ctypes.byref(out), comm_ptr=self._ptr)
        return out.value

    @property
    def nranks(self):
        if self._nranks is None:
            self._nranks = self._query_int("ncclCommCount", "nranks")
        return self._nranks

    @property
    def rank(self):
        if self._rank is None:
            self._rank = self._query_int("ncclCommUserRank", "rank")
        return self._rank

    @property
    def device(self):
        """The CUDA device of this communicator (negative on host communicators)."""
        if self._device is None:
            self._device = self._query_int("ncclCommCuDevice", "device")
        return self._device

    def _properties(self, what):
        self._require(what)
        p = _lib.PropertiesStruct()
        p.size = ctypes.sizeof(p)
        p.magic = _lib.API_MAGIC
        p.version = _lib.HEADER_VERSION
        _lib.call("ncclCommQueryProperties", self._ptr, ctypes.byref(p), comm_ptr=self._ptr)
        return p

    @property
    def cuda_dev(self):
        return self._properties("cuda_dev").cudaDev

    @property
    def nvml_dev(self):
        return self._properties("nvml_dev").nvmlDev

    @property
    def device_api_support(self):
        return bool(self._properties("device_api_support").deviceApiSupport)

    @property
    def multimem_support(self):
        return bool(self._properties("multimem_support").multimemSupport)

    @property
    def gin_type(self):
        return gin_type(self._properties("gin_type").ginType)

    @property
    def railed_gin_type(self):
        return gin_type(self._properties("railed_gin_type").railedGinType)

    @property
    def n_lsa_teams(self):
        return self._properties("n_lsa_teams").nLsaTeams

    @property
    def host_rma_support(self):
        return bool(self._properties("host_rma_support").hostRmaSupport)

    def __repr__(self):
        if not self._ptr:
            return "<mpccl.Communicator null>"
        return "<mpccl.Communicator rank %d of %d, device %d>" % (self.rank, self.nranks,
                                                                  self.device)

    # ---- argument helpers ------------------------------------------------------------

    def _buf(self, obj, what, writable):
        return resolve(obj, what, writable=writable, comm_device=self.device)

    def _op(self, op):
        if isinstance(op, CustomRedOp):
            if op._comm is not self:
                op._require_valid("op")
                raise errors.invalid_argument("op: this CustomRedOp belongs to another communicator")
            return op.op
        if isinstance(op, bool) or not isinstance(op, int):
            raise errors.invalid_argument("op = %r: expected an NcclRedOp or a CustomRedOp" % (op,))
        return int(op)

    @staticmethod
    def _same_type(a, b, what):
        if a.dtype != b.dtype:
            raise errors.invalid_argument("%s: sendbuf is %s but recvbuf is %s"
                                          % (what, a.dtype.name, b.dtype.name))

    @staticmethod
    def _counts(what, name, have, want):
        if have != want:
            raise errors.invalid_argument("%s: %s holds %d elements, expected %d"
                                          % (what, name, have, want))

    # ---- collectives -------------------------------------------------------------------

    def allreduce(self, sendbuf, recvbuf, op, *, stream=None):
        """Reduces sendbuf over all ranks into every rank's recvbuf (same count)."""
        ptr = self._require("allreduce")
        s = self._buf(sendbuf, "allreduce sendbuf", False)
        r = self._buf(recvbuf, "allreduce recvbuf", True)
        self._same_type(s, r, "allreduce")
        self._counts("allreduce", "recvbuf", r.count, s.count)
        _lib.call("ncclAllReduce", s.ptr, r.ptr, s.count, s.dtype, self._op(op), ptr,
                  stream_handle(stream), comm_ptr=ptr)

    def reduce(self, sendbuf, recvbuf, op, root, *, stream=None):
        """Reduces into recvbuf on root (recvbuf may be None elsewhere).
        root=None means allreduce."""
        if root is None:
            return self.allreduce(sendbuf, recvbuf, op, stream=stream)
        ptr = self._require("reduce")
        root = _root_arg(root, self.nranks)
        s = self._buf(sendbuf, "reduce sendbuf", False)
        rptr = 0
        if self.rank == root or recvbuf is not None:
            r = self._buf(recvbuf, "reduce recvbuf", True)
            self._same_type(s, r, "reduce")
            self._counts("reduce", "recvbuf", r.count, s.count)
            rptr = r.ptr
        _lib.call("ncclReduce", s.ptr, rptr, s.count, s.dtype, self._op(op), root, ptr,
                  stream_handle(stream), comm_ptr=ptr)

    def broadcast(self, sendbuf, recvbuf, root, *, stream=None):
        """Copies root's sendbuf into every rank's recvbuf; count from recvbuf.
        sendbuf is read on root only (may be None elsewhere)."""
        ptr = self._require("broadcast")
        root = _root_arg(root, self.nranks)
        r = self._buf(recvbuf, "broadcast recvbuf", True)
        sptr = r.ptr
        if self.rank == root and sendbuf is not None:
            s = self._buf(sendbuf, "broadcast sendbuf", False)
            self._same_type(s, r, "broadcast")
            self._counts("broadcast", "sendbuf", s.count, r.count)
            sptr = s.ptr
        _lib.call("ncclBroadcast", sptr, r.ptr, r.count, r.dtype, root, ptr,
                  stream_handle(stream), comm_ptr=ptr)

    def allgather(self, sendbuf, recvbuf, *, stream=None):
        """recvbuf (nranks * count elements) gets every rank's sendbuf in rank order."""
        ptr = self._require("allgather")
        s = self._buf(sendbuf, "allgather sendbuf", False)
        r = self._buf(recvbuf, "allgather recvbuf", True)
        self._same_type(s, r, "allgather")
        self._counts("allgather", "recvbuf", r.count, s.count * self.nranks)
        _lib.call("ncclAllGather", s.ptr, r.ptr, s.count, s.dtype, ptr, stream_handle(stream),
                  comm_ptr=ptr)

    def reduce_scatter(self, sendbuf, recvbuf, op, *, stream=None):
        """Reduces sendbuf (nranks * count) and leaves block `rank` in recvbuf (count)."""
        ptr = self._require("reduce_scatter")
        s = self._buf(sendbuf, "reduce_scatter sendbuf", False)
        r = self._buf(recvbuf, "reduce_scatter recvbuf", True)
        self._same_type(s, r, "reduce_scatter")
        self._counts("reduce_scatter", "sendbuf", s.count, r.count * self.nranks)
        _lib.call("ncclReduceScatter", s.ptr, r.ptr, r.count, r.dtype, self._op(op), ptr,
                  stream_handle(stream), comm_ptr=ptr)

    def alltoall(self, sendbuf, recvbuf, *, stream=None):
        """Block j of sendbuf goes to rank j; both hold nranks equal blocks."""
        ptr = self._require("alltoall")
        s = self._buf(sendbuf, "alltoall sendbuf", False)
        r = self._buf(recvbuf, "alltoall recvbuf", True)
        self._same_type(s, r, "alltoall")
        n = self.nranks
        if s.count % n:
            raise errors.invalid_argument("alltoall: sendbuf holds %d elements, not a multiple of "
                                          "nranks = %d" % (s.count, n))
        self._counts("alltoall", "recvbuf", r.count, s.count)
        _lib.call("ncclAlltoAll", s.ptr, r.ptr, s.count // n, s.dtype, ptr, stream_handle(stream),
                  comm_ptr=ptr)

    def gather(self, sendbuf, recvbuf, root, *, stream=None):
        """root's recvbuf (nranks * count) gets every sendbuf; recvbuf may be None elsewhere."""
        ptr = self._require("gather")
        root = _root_arg(root, self.nranks)
        s = self._buf(sendbuf, "gather sendbuf", False)
        rptr = 0
        if self.rank == root or recvbuf is not None:
            r = self._buf(recvbuf, "gather recvbuf", True)
            self._same_type(s, r, "gather")
            self._counts("gather", "recvbuf", r.count, s.count * self.nranks)
            rptr = r.ptr
        _lib.call("ncclGather", s.ptr, rptr, s.count, s.dtype, root, ptr, stream_handle(stream),
                  comm_ptr=ptr)

    def scatter(self, sendbuf, recvbuf, root, *, stream=None):
        """Block j of root's sendbuf (nranks * count) goes to rank j's recvbuf (count)."""
        ptr = self._require("scatter")
        root = _root_arg(root, self.nranks)
        r = self._buf(recvbuf, "scatter recvbuf", True)
        sptr = 0
        if self.rank == root or sendbuf is not None:
            s = self._buf(sendbuf, "scatter sendbuf", False)
            self._same_type(s, r, "scatter")
            self._counts("scatter", "sendbuf", s.count, r.count * self.nranks)
            sptr = s.ptr
        _lib.call("ncclScatter", sptr, r.ptr, r.count, r.dtype, root, ptr, stream_handle(stream),
                  comm_ptr=ptr)

    # The spellings of nccl4py and of other Python bindings.
    all_reduce = allreduce
    all_gather = allgather
    reducescatter = reduce_scatter

    # ---- point to point -------------------------------------------------------------------

    def send(self, sendbuf, peer, *, stream=None):
        ptr = self._require("send")
        peer = _root_arg(peer, self.nranks, "peer")
        s = self._buf(sendbuf, "send sendbuf", False)
        _lib.call("ncclSend", s.ptr, s.count, s.dtype, peer, ptr, stream_handle(stream),
                  comm_ptr=ptr)

    def recv(self, recvbuf, peer, *, stream=None):
        ptr = self._require("recv")
        peer = _root_arg(peer, self.nranks, "peer")
        r = self._buf(recvbuf, "recv recvbuf", True)
        _lib.call("ncclRecv", r.ptr, r.count, r.dtype, peer, ptr, stream_handle(stream),
                  comm_ptr=ptr)

    # ---- one-sided ------------------------------------------------------------------------

    def put_signal(self, local_buffer, peer, peer_window, peer_window_offset=0,
                   signal_index=0, context=0, flags=0, *, stream=None):
        """Writes local_buffer into peer's window at peer_window_offset *elements*
        (of the buffer's datatype), then bumps peer's signal signal_index."""
        ptr = self._require("put_signal")
        peer = _root_arg(peer, self.nranks, "peer")
        if not isinstance(peer_window, RegisteredWindowHandle):
            raise errors.invalid_argument("peer_window: expected the RegisteredWindowHandle "
                                          "returned by register_window")
        if peer_window._comm is not self:
            peer_window._require_valid("put_signal peer_window")
            raise errors.invalid_argument("peer_window belongs to another communicator")
        win = peer_window.handle
        s = self._buf(local_buffer, "put_signal local_buffer", False)
        if peer_window_offset < 0:
            raise errors.invalid_argument("peer_window_offset = %d: cannot be negative"
                                          % peer_window_offset)
        _lib.call("ncclPutSignal", s.ptr, s.count, s.dtype, peer, win,
                  int(peer_window_offset) * s.dtype.itemsize, int(signal_index), int(context),
                  int(flags), ptr, stream_handle(stream), comm_ptr=ptr)

    def signal(self, peer, signal_index=0, context=0, flags=0, *, stream=None):
        ptr = self._require("signal")
        peer = _root_arg(peer, self.nranks, "peer")
        _lib.call("ncclSignal", peer, int(signal_index), int(context), int(flags), ptr,
                  stream_handle(stream), comm_ptr=ptr)

    def wait_signal(self, descs, *, stream=None):
        """Waits (on the stream) until each WaitSignalDesc's count of signals arrived."""
        ptr = self._require("wait_signal")
        if isinstance(descs, WaitSignalDesc):
            descs = [descs]
        descs = list(descs)
        if not descs:
            raise errors.invalid_argument("wait_signal: descs is empty")
        arr = (_lib.WaitSignalDescStruct * len(descs))()
        for i, d in enumerate(descs):
            if not isinstance(d, WaitSignalDesc):
                raise errors.invalid_argument("wait_signal: descs[%d] is %s, expected WaitSignalDesc"
                                              % (i, type(d).__name__))
            arr[i].opCnt, arr[i].peer = d.op_count, d.peer
            arr[i].sigIdx, arr[i].ctx = d.signal_index, d.context
        _lib.call("ncclWaitSignal", len(descs), arr, ptr, stream_handle(stream), comm_ptr=ptr)

    # ---- resources -------------------------------------------------------------------------

    def register_buffer(self, buffer):
        """ncclCommRegister: returns a RegisteredBufferHandle tracked by this communicator."""
        ptr = self._require("register_buffer")
        b = self._buf(buffer, "register_buffer buffer", False)
        handle = ctypes.c_void_p()
        _lib.call("ncclCommRegister", ptr, b.ptr, b.nbytes, ctypes.byref(handle), comm_ptr=ptr)
        return RegisteredBufferHandle(self, handle.value, b.ptr, b.nbytes, (buffer, b.keep))

    def register_window(self, buffer, flags=None):
        """Collective ncclCommWindowRegister: every rank registers a buffer."""
        ptr = self._require("register_window")
        flags = WindowFlag.DEFAULT if flags is None else WindowFlag(flags)
        b = self._buf(buffer, "register_window buffer", True)
        win = ctypes.c_void_p()
        _lib.call("ncclCommWindowRegister", ptr, b.ptr, b.nbytes, ctypes.byref(win), int(flags),
                  comm_ptr=ptr)
        if not win.value:
            return None  # a grouped registration: filled at group end (as in nccl4py)
        return RegisteredWindowHandle(self, win.value, b.ptr, b.nbytes, (buffer, b.keep))

    def create_pre_mul_sum(self, scalar, datatype=None, residence=None):
        """Operator sum(scalar * x).  A host scalar (a Python number, or a NumPy
        scalar/array of one element) is read now; a device buffer is read when
        each collective runs (residence DEVICE) and must outlive the operator."""
        ptr = self._require("create_pre_mul_sum")
        keep = None
        if isinstance(scalar, (int, float)) and not isinstance(scalar, bool):
            if datatype is None:
                raise errors.invalid_argument("create_pre_mul_sum: a Python number needs datatype=")
            datatype = NcclDataType(datatype)
            residence = NcclScalarResidence.HOST_IMMEDIATE if residence is None else residence
            if NcclScalarResidence(residence) != NcclScalarResidence.HOST_IMMEDIATE:
                raise errors.invalid_argument("create_pre_mul_sum: a Python number lives on the "
                                              "host: residence must be HOST_IMMEDIATE")
            keep = _scalar_bytes(scalar, datatype)
            addr = ctypes.addressof(keep)
        else:
            b = resolve(scalar, "create_pre_mul_sum scalar", writable=False,
                        comm_device=None if residence is None or
                        NcclScalarResidence(residence) == NcclScalarResidence.HOST_IMMEDIATE
                        else self.device)
            if b.count < 1:
                raise errors.invalid_argument("create_pre_mul_sum: the scalar buffer is empty")
            datatype = b.dtype if datatype is None else NcclDataType(datatype)
            if residence is None:
                residence = (NcclScalarResidence.DEVICE if b.kind == "cuda"
                             else NcclScalarResidence.HOST_IMMEDIATE)
            addr, keep = b.ptr, (scalar, b.keep)
        op = ctypes.c_int()
        _lib.call("ncclRedOpCreatePreMulSum", ctypes.byref(op), addr, int(datatype),
                  int(residence), ptr, comm_ptr=ptr)
        residence = NcclScalarResidence(residence)
        return CustomRedOp(self, op.value,
                           keep if residence == NcclScalarResidence.DEVICE else None)

    def create_dev_comm(self, requirements=None):
        """ncclDevCommCreate (collective): a device communicator for user kernels.
        `requirements`: None (the defaults), a DevCommRequirements, a dict of its
        fields (e.g. {"lsaBarrierCount": 16}) or the address of a C struct."""
        ptr = self._require("create_dev_comm")
        if requirements is None:
            requirements = DevCommRequirements()
        elif isinstance(requirements, dict):
            requirements = DevCommRequirements(**requirements)
        reqs = (ctypes.addressof(requirements) if isinstance(requirements, DevCommRequirements)
                else int(requirements))
        storage = (ctypes.c_char * DevCommResource._STORAGE_BYTES)()
        _lib.call("ncclDevCommCreate", ptr, reqs, ctypes.addressof(storage), comm_ptr=ptr)
        return DevCommResource(self, storage)


def _scalar_bytes(value, datatype):
    ctype = {NcclDataType.INT8: ctypes.c_int8, NcclDataType.UINT8: ctypes.c_uint8,
             NcclDataType.INT32: ctypes.c_int32, NcclDataType.UINT32: ctypes.c_uint32,
             NcclDataType.INT64: ctypes.c_int64, NcclDataType.UINT64: ctypes.c_uint64,
             NcclDataType.FLOAT32: ctypes.c_float, NcclDataType.FLOAT64: ctypes.c_double}.get(datatype)
    if ctype is not None:
        return ctype(value)
    try:
        import numpy
        arr = numpy.array([value], dtype=datatype.numpy_dtype)
    except (ImportError, TypeError):
        raise errors.invalid_argument("create_pre_mul_sum: pass a %s scalar as a one-element "
                                      "array" % datatype.name)
    return (ctypes.c_char * arr.nbytes).from_buffer_copy(arr.tobytes())


class WaitSignalDesc:
    """What wait_signal waits for: op_count signals from peer on signal_index/context."""

    __slots__ = ("peer", "op_count", "signal_index", "context")

    def __init__(self, peer, op_count=1, signal_index=0, context=0):
        self.peer = int(peer)
        self.op_count = int(op_count)
        self.signal_index = int(signal_index)
        self.context = int(context)

    def __repr__(self):
        return ("WaitSignalDesc(peer=%d, op_count=%d, signal_index=%d, context=%d)"
                % (self.peer, self.op_count, self.signal_index, self.context))

