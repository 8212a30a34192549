"""The lossless delta codec of checkpoint weights: a safetensors file against its parent's.

- The payload is the safetensors header verbatim, then the data section transformed against the
  parent's tensor of the same name/dtype/shape (a tensor without one is stored raw, a non-float
  one XOR the parent's): for float tensors the zigzag-coded integer difference of the bit
  patterns, the elements ordered by the parent's exponent, byte planes per tensor (all high
  bytes together, then the low ones), all in one zstd frame.
- Integer arithmetic and permutations only, so the decode is bit-exact. Format 4
  (`DELTA_FORMAT`, written) also matches an fp32 tensor with a bf16/fp16 parent tensor, widened
  exactly: a master folder is stored against its own version's weights (~half of the fp32 file:
  the bits below bf16). Formats 1 (XOR), 2 (no exponent order) and 3 (no widening) are still
  read (`DELTA_FORMATS`: format -> method and widening).
- `encode_delta_to` / `decode_delta_to` stream one tensor at a time between buffers (bytes or
  memory maps) and binary files; `encode_delta` / `decode_delta` are the in-memory forms.
  lib/checkpoints/checkpoint.py stores versions with it (compact, materialize).

Trade-off: a lossless delta cannot shrink bits that really changed. AdamW moves every weight by
about the LR per step, so after 200 steps at lr_scale 0.1 a weight has moved by ~1-5% of its
value: a few ulps of bf16 (a delta of about a third of the checkpoint), but ~2^17 ulps of fp32,
whose low two mantissa bytes are then noise (about 70%). Measured in bench/bench_delta.py.
"""

from __future__ import annotations

import io
import json
import struct

import numpy as np
import zstandard

DELTA_FORMAT = "diff-expgroup-byteplane-zstd/4"  # written; formats 1-3 are still read
# format -> (method, widen): format 4 is format 3 that also matches an fp32 tensor against the
# parent's bf16/fp16 tensor of the same name and shape, widened exactly (master vs its own export)
DELTA_FORMATS = {"xor-byteplane-zstd/1": ("xor", False), "diff-byteplane-zstd/2": ("diff", False),
                 "diff-expgroup-byteplane-zstd/3": ("grouped", False), DELTA_FORMAT: ("grouped", True)}
_ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
             "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}


class CheckpointError(ValueError):
    """A version folder that is incomplete, corrupt, or whose delta chain cannot be restored
    (lib.checkpoints.checkpoint raises it too: one error for stored weights, defined where the codec can
    raise it without importing the checkpoint module)."""


# -- safetensors layout ---------------------------------------------------------------------------
def _split_safetensors(raw: bytes | memoryview, where: str) -> tuple[bytes, dict, memoryview]:
    """(header bytes incl. length prefix, parsed header, data section) of a safetensors file."""
    raw = memoryview(raw)
    if len(raw) < 8:
        raise CheckpointError(f"{where} is too short to be a safetensors file")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise CheckpointError(f"{where}: safetensors header length {n} exceeds the file size")
    header = json.loads(bytes(raw[8 : 8 + n]))
    return bytes(raw[: 8 + n]), header, raw[8 + n :]


def _tensors(header: dict) -> dict[str, dict]:
    return {k: v for k, v in header.items() if k != "__metadata__"}


_FLOAT_UINT = {"F32": "<u4", "F16": "<u2", "BF16": "<u2", "F64": "<u8"}


def _diff(x, ref, header: dict, matched: list[str], inverse: bool) -> None:
    """In place on the data bytes `x`: for shared float tensors, the zigzag-coded integer
    difference of the bit patterns (target - parent, mod 2^bits); XOR for everything else.
    A weight that moved by a few ulps costs a few low bits, where XOR also flips every bit
    between the changed ones and the top of the mantissa. `inverse` undoes it given `ref`."""
    x ^= ref  # XOR everywhere first; float tensors are redone below
    for name in matched:
        info = header[name]
        kind = _FLOAT_UINT.get(info["dtype"])
        b, e = info["data_offsets"]
        if kind is None or e <= b:
            continue
        bits = np.dtype(kind).itemsize * 8
        seg = x[b:e].view(kind)
        base = ref[b:e].view(kind)
        seg ^= base  # back to the raw target (or the stored code)
        one, shift = np.array(1, kind), np.array(bits - 1, kind)
        with np.errstate(over="ignore"):
            if not inverse:
                d = seg - base                      # wraps mod 2^bits
                seg[:] = (d << one) ^ (0 - (d >> shift))  # zigzag: small |d| -> small code
            else:
                d = (seg >> one) ^ (0 - (seg & one))
                seg[:] = base + d


def _byteplanes(buf, header: dict, inverse: bool) -> None:
    """In place: group byte k of every element of a tensor together (or undo it)."""
    for info in _tensors(header).values():
        k = _ITEMSIZE.get(info["dtype"], 1)
        b, e = info["data_offsets"]
        if k == 1 or e <= b or (e - b) % k:
            continue
        seg = buf[b:e]
        buf[b:e] = (seg.reshape(k, -1).T if inverse else seg.reshape(-1, k).T).reshape(-1)


def _xor(x, ref, header: dict, matched: list[str], inverse: bool) -> None:
    x ^= ref


# bit offset and mask of the exponent field of each float dtype's bit pattern (sign excluded)
_EXPONENT = {"F32": (23, 0xFF), "BF16": (7, 0xFF), "F16": (10, 0x1F), "F64": (52, 0x7FF)}
GROUP_CHUNK = 1 << 22  # elements ordered together; bounds the permutation's memory to 32 MB


def _group_by_exponent(x, ref, header: dict, matched: list[str], inverse: bool) -> None:
    """In place on the differenced data bytes: within each chunk of a shared float tensor, put
    the elements in the (stable) order of their PARENT's exponent. AdamW moves every weight by
    about the same amount, so a small weight moves by many ulps and a large one by few: grouped
    by magnitude, each run of codes has one distribution and zstd's per-block Huffman tables
    fit it (about 3 points of a bf16 checkpoint; bench/bench_delta.py). The order comes from
    the parent, which the decoder holds, so it costs no bytes."""
    for name in matched:
        info = header[name]
        kind, field = _FLOAT_UINT.get(info["dtype"]), _EXPONENT.get(info["dtype"])
        b, e = info["data_offsets"]
        if kind is None or field is None or e <= b:
            continue
        seg, base = x[b:e].view(kind), ref[b:e].view(kind)
        shift, mask = field
        key_type = np.uint8 if mask <= 0xFF else np.uint16  # radix sort for small keys
        for s in range(0, seg.size, GROUP_CHUNK):
            part = seg[s : s + GROUP_CHUNK]
            order = np.argsort(((base[s : s + GROUP_CHUNK] >> shift) & mask).astype(key_type), kind="stable")
            if inverse:
                out = np.empty_like(part)
                out[order] = part
                part[:] = out
            else:
                part[:] = part[order]


# the in-place transforms of each delta method, applied in order before the byte planes
_METHODS = {"xor": (_xor,), "diff": (_diff,), "grouped": (_diff, _group_by_exponent)}


# -- delta storage --------------------------------------------------------------------------------
# The codec streams tensor by tensor: both files are memory-mapped and each tensor is transformed
# and fed to one zstd frame (or read back from it) on its own, so memory stays near the largest
# tensor, not the model; the bytes are the same as transforming the whole data section at once.
_WIDENS_TO_F32 = ("BF16", "F16")


def _matches(info: dict, p: dict | None, widen: bool) -> bool:
    if p is None or p["shape"] != info["shape"]:
        return False
    return p["dtype"] == info["dtype"] or (widen and info["dtype"] == "F32" and p["dtype"] in _WIDENS_TO_F32)


def _segments(t_header: dict, data_len: int, p_header: dict, widen: bool = True):
    """(start, end, name or None, parent tensor info or None) covering the target's data section
    in order: each tensor, with its parent counterpart when name, dtype and shape match (or, with
    `widen`, an fp32 tensor and a bf16/fp16 parent), and any bytes between tensors as raw segments."""
    parent_tensors = _tensors(p_header)
    pos = 0
    for name, info in sorted(_tensors(t_header).items(), key=lambda kv: kv[1]["data_offsets"]):
        b, e = info["data_offsets"]
        if b < pos or e < b or e > data_len:
            raise CheckpointError(f"tensor {name!r} has data offsets {b}..{e} outside or overlapping the data section")
        if b > pos:
            yield pos, b, None, None
        p = parent_tensors.get(name)
        yield b, e, name, p if _matches(info, p, widen) else None
        pos = e
    if pos < data_len:
        yield pos, data_len, None, None


def _transform(x, parent_data, name, info, parent_info, method: str, inverse: bool) -> None:
    """In place on one tensor's bytes `x`: the method's steps, then byte planes (or the inverse
    of both), with the tensor seen as a whole data section of its own."""
    if name is None:  # bytes between tensors: stored as they are
        return
    header = {name: {**info, "data_offsets": [0, x.size]}}
    if parent_info is not None:
        pb, pe = parent_info["data_offsets"]
        ref, matched = np.frombuffer(parent_data[pb:pe], dtype=np.uint8), [name]
        if parent_info["dtype"] != info["dtype"]:  # a bf16/fp16 parent of an fp32 tensor, widened exactly
            ref = _widen_to_f32(ref, parent_info["dtype"])
    else:
        ref, matched = np.zeros(x.size, dtype=np.uint8), []
    steps = _METHODS[method]
    if inverse:
        _byteplanes(x, header, inverse=True)
        for step in reversed(steps):
            step(x, ref, header, matched, inverse=True)
    else:
        for step in steps:
            step(x, ref, header, matched, inverse=False)
        _byteplanes(x, header, inverse=False)


def _widen_to_f32(raw, dtype: str):
    """The bytes of the fp32 tensor equal to a bf16 or fp16 one (exact: both widen losslessly)."""
    if dtype == "BF16":
        return (raw.view("<u2").astype("<u4") << np.uint32(16)).view(np.uint8)
    return raw.view("<f2").astype("<f4").view(np.uint8)


def _check_method(method: str) -> None:
    if method not in _METHODS:
        raise ValueError(f"unknown delta method {method!r}; one of {', '.join(_METHODS)}")


def encode_delta_to(target, parent, out, *, level: int = 3, method: str = "grouped", widen: bool = True) -> dict:
    """Write the delta of the safetensors buffer `target` against `parent` (bytes or mmap) to the
    binary file `out`: the header verbatim, then each segment transformed, in one zstd frame.
    method "grouped" with widen (format 4, the default), "grouped" (format 3), "diff" (format 2)
    or "xor" (format 1)."""
    _check_method(method)
    head, t_header, t_data = _split_safetensors(target, "target")
    _, p_header, p_data = _split_safetensors(parent, "parent")
    z = zstandard.ZstdCompressor(level=level, threads=-1, write_checksum=True).compressobj(size=len(target))
    out.write(z.compress(head))
    matched = 0
    for b, e, name, p_info in _segments(t_header, len(t_data), p_header, widen):
        x = np.frombuffer(t_data[b:e], dtype=np.uint8).copy()
        _transform(x, p_data, name, t_header.get(name), p_info, method, inverse=False)
        out.write(z.compress(x.data))
        matched += p_info is not None
    out.write(z.flush())
    return {"tensors": len(_tensors(t_header)), "tensors_matched": matched, "method": method}


def decode_delta_to(payload, parent, out, method: str = "grouped", widen: bool = True) -> None:
    """Inverse of `encode_delta_to`: read the delta from the binary file `payload` and write the
    target file's exact bytes to `out` (anything with `write`: a file, a hashing sink)."""
    _check_method(method)
    reader = zstandard.ZstdDecompressor().stream_reader(payload, read_across_frames=False)

    def read(n: int) -> bytes:
        chunks, left = [], n
        while left:
            chunk = reader.read(left)
            if not chunk:
                raise CheckpointError(f"delta payload ends {left} bytes early: the file is truncated or corrupt")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    prefix = read(8)
    (n,) = struct.unpack("<Q", prefix)
    if n > 100_000_000:
        raise CheckpointError(f"delta payload: a safetensors header of {n} bytes is implausible; the file is corrupt")
    header_bytes = read(n)
    t_header = json.loads(header_bytes)
    _, p_header, p_data = _split_safetensors(parent, "parent")
    tensors = _tensors(t_header)
    data_len = max((info["data_offsets"][1] for info in tensors.values()), default=0)
    out.write(prefix + header_bytes)
    for b, e, name, p_info in _segments(t_header, data_len, p_header, widen):
        x = np.frombuffer(read(e - b), dtype=np.uint8).copy()
        _transform(x, p_data, name, tensors.get(name), p_info, method, inverse=True)
        out.write(x.data)
    if reader.read(1):
        raise CheckpointError("delta payload holds bytes past the last tensor: the file is corrupt")


def encode_delta(target: bytes, parent: bytes, *, level: int = 3, method: str = "grouped", widen: bool = True) -> tuple[bytes, dict]:
    """`encode_delta_to` in memory: returns (delta bytes, stats)."""
    buf = io.BytesIO()
    stats = encode_delta_to(target, parent, buf, level=level, method=method, widen=widen)
    return buf.getvalue(), stats


def decode_delta(payload: bytes, parent: bytes, method: str = "grouped", widen: bool = True) -> bytes:
    """`decode_delta_to` in memory: the target file's exact bytes."""
    buf = io.BytesIO()
    decode_delta_to(io.BytesIO(payload), parent, buf, method, widen)
    return buf.getvalue()
