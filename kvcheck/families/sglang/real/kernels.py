"""CPU equivalents of the Triton kernels SGLang's allocation code calls (issue 21).

kvcheck runs a release's own sizing, allocation and release functions from source, but not its
Triton kernels: there is no GPU, and a kernel is not Python the loader can compile. Each kernel
the allocation functions reach is replaced by a function here with the kernel's exact semantics,
read from the release (docs/release-allocation.md gives file:line per release):

- `assign_req_to_token_pool`: SGLang's `assign_req_to_token_pool` kernel behind
  `assign_req_to_token_pool_func` (0.5.23 mem_cache/allocation.py:692 and :737; 0.5.13-0.5.15
  speculative/triton_ops/cache_locs.py; before, speculative/spec_utils.py). Program `i` writes
  request `i`'s positions `[start_i, end_i)` of its `req_to_token` row from
  `out_cache_loc[offset_i:]`, where `offset_i = sum over j < i of (end_j - start_j)`. The sum is
  of signed lengths: a request with `end < start` writes nothing itself but moves every later
  request's offset back, so later rows receive other requests' slots (what a negative decode
  allocation did before the 0.5.12 clamp, sglang#23336).
- `last_loc`: `get_last_loc_kernel` / `get_last_loc_triton(_safe)` (0.5.23
  kernels/ops/memory/common.py:91-163; before 0.5.16 in mem_cache/common.py), and the pure-torch
  `get_last_loc_torch` they agree with: per request the slot at position `prefix - 1` of its row,
  or -1 when `prefix <= 0`.
- `write_req_to_token_pool`: the prefill's `write_req_to_token_pool_triton` (0.5.16+
  kernels/ops/memory/common.py:9, launched by `write_cache_indices`, mem_cache/allocation.py:79
  in 0.5.23). Program `i` copies `pre_len_i` slots of request `i`'s matched prefix to the start
  of its row, then `seq_len_i - pre_len_i` slots of `out_cache_loc` from offset
  `sum over j < i of extend_len_j` after them. The count is taken from the sequence lengths and
  the offset from the extend lengths: the kernel never checks they agree.

Both address `req_to_token` as the flat row-major memory the kernels see
(`row * width + position`): a position at or past the row's width lands in the next row, as it
does on the device. An access outside the whole tensor, or a read outside `out_cache_loc`, has no
defined result on the device; here it raises `KernelOutOfBounds`, the target code's doing (it
passed the lengths), never kvcheck's.
"""

from __future__ import annotations

from typing import Any

import attrs


class KernelUnsupported(NotImplementedError):
    """A kernel equivalent asked for what kvcheck never sets up: a prefill that copies a matched
    prefix through raw device pointers (kvcheck's caches share no prefix). kvcheck's gap, never
    a verdict."""


class KernelOutOfBounds(IndexError):
    """A kernel equivalent asked to read or write outside the tensors it was given: on the device
    an out-of-bounds access with no defined result. Raised because of the lengths the caller
    passed, so it is the caller's (the release code's) fault."""


@attrs.frozen
class RowWrite:
    """One contiguous write a kernel made: `values` into `row` at positions `[start, start +
    len(values))`, with positions counted from the start of `row` in the flat tensor (so a write
    past the width continues in the next row, as `flat_positions` shows)."""

    row: int
    start: int
    values: tuple[int, ...]

    def flat_positions(self, width: int) -> range:
        """The flat offsets into `req_to_token` this write covered."""
        first = self.row * width + self.start
        return range(first, first + len(self.values))


def assign_req_to_token_pool(
    req_pool_indices: Any,
    req_to_token: Any,
    start_offset: Any,
    end_offset: Any,
    out_cache_loc: Any,
    batch_size: int,
) -> list[RowWrite]:
    """`assign_req_to_token_pool_func(req_pool_indices, req_to_token, start_offset, end_offset,
    out_cache_loc, batch_size)` on CPU tensors, in place (module docstring). Returns the writes
    made, in program order, for the caller to bind slots to requests."""
    width = int(req_to_token.shape[1])
    flat = req_to_token.view(-1)
    starts = [int(value) for value in start_offset[:batch_size].tolist()]
    ends = [int(value) for value in end_offset[:batch_size].tolist()]
    rows = [int(value) for value in req_pool_indices[:batch_size].tolist()]
    source = out_cache_loc.reshape(-1)
    writes: list[RowWrite] = []
    offset = 0
    for row, start, end in zip(rows, starts, ends, strict=True):
        length = end - start
        if length > 0:
            if offset < 0 or offset + length > source.shape[0]:
                raise KernelOutOfBounds(
                    f"assign_req_to_token_pool reads out_cache_loc[{offset}:{offset + length}] "
                    f"of {source.shape[0]} slots (an earlier request's end < start moved it)"
                )
            first = row * width + start
            if start < 0 or first < 0 or first + length > flat.shape[0]:
                raise KernelOutOfBounds(
                    f"assign_req_to_token_pool writes positions [{start}, {end}) of row {row} "
                    f"outside req_to_token {tuple(req_to_token.shape)}"
                )
            values = source[offset : offset + length]
            flat[first : first + length] = values.to(flat.dtype)
            writes.append(RowWrite(row, start, tuple(int(v) for v in values.tolist())))
        offset += length  # signed: a negative length moves every later request back
    return writes


def last_loc(req_to_token: Any, req_pool_indices: Any, prefix_lens: Any) -> Any:
    """`get_last_loc(req_to_token, req_pool_indices_tensor, prefix_lens_tensor)`: per request
    the slot at position `prefix - 1` of its row (flat addressing), -1 where `prefix <= 0`; a
    tensor of `prefix_lens`' dtype."""
    import torch

    width = int(req_to_token.shape[1])
    flat = req_to_token.view(-1)
    out = torch.full_like(prefix_lens, -1)
    for i, (row, prefix) in enumerate(
        zip(req_pool_indices.tolist(), prefix_lens.tolist(), strict=True)
    ):
        if prefix <= 0:
            continue
        at = int(row) * width + int(prefix) - 1
        if at < 0 or at >= flat.shape[0]:
            raise KernelOutOfBounds(
                f"get_last_loc reads position {int(prefix) - 1} of row {int(row)} outside "
                f"req_to_token {tuple(req_to_token.shape)}"
            )
        out[i] = flat[at]
    return out


def write_req_to_token_pool(
    req_to_token: Any,
    req_pool_indices: Any,
    prefix_pointers: Any,
    pre_lens: Any,
    seq_lens: Any,
    extend_lens: Any,
    out_cache_loc: Any,
    stride: int,
) -> list[RowWrite]:
    """`write_req_to_token_pool_triton[(batch,)](req_to_token, req_pool_indices, prefix_pointers,
    pre_lens, seq_lens, extend_lens, out_cache_loc, stride)` on CPU tensors, in place (module
    docstring); one program per entry of `req_pool_indices`. Returns the writes made, in
    program order. A prefix to copy (`pre_len > 0`) is `KernelUnsupported`: its slots sit behind
    a raw pointer."""
    del prefix_pointers  # only read for a prefix, which kvcheck never admits with
    flat = req_to_token.view(-1)
    source = out_cache_loc.reshape(-1)
    rows = [int(value) for value in req_pool_indices.reshape(-1).tolist()]
    prefixes = [int(value) for value in pre_lens.tolist()]
    ends = [int(value) for value in seq_lens.tolist()]
    extends = [int(value) for value in extend_lens.tolist()]
    writes: list[RowWrite] = []
    for program, row in enumerate(rows):
        prefix, end = prefixes[program], ends[program]
        if prefix > 0:
            raise KernelUnsupported(
                f"write_req_to_token_pool copies a {prefix}-slot prefix into row {row}: kvcheck "
                "admits no request with a cached prefix"
            )
        length = end - prefix
        if length <= 0:
            continue
        offset = sum(extends[:program])
        if offset < 0 or offset + length > source.shape[0]:
            raise KernelOutOfBounds(
                f"write_req_to_token_pool reads out_cache_loc[{offset}:{offset + length}] of "
                f"{source.shape[0]} slots for row {row}"
            )
        first = row * int(stride) + prefix
        if first < 0 or first + length > flat.shape[0]:
            raise KernelOutOfBounds(
                f"write_req_to_token_pool writes positions [{prefix}, {end}) of row {row} "
                f"outside req_to_token {tuple(req_to_token.shape)}"
            )
        values = source[offset : offset + length]
        flat[first : first + length] = values.to(flat.dtype)
        writes.append(RowWrite(row, prefix, tuple(int(v) for v in values.tolist())))
    return writes
