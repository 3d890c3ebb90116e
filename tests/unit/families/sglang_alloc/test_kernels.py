"""The CPU equivalents of SGLang's allocation kernels (kvcheck.families.sglang.real.kernels)."""

from __future__ import annotations

import pytest
import torch

from kvcheck.families.sglang.real.kernels import (
    KernelOutOfBounds,
    KernelUnsupported,
    RowWrite,
    assign_req_to_token_pool,
    last_loc,
    write_req_to_token_pool,
)


def _tensor(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


def test_assign_writes_each_row_from_its_running_offset() -> None:
    table = torch.zeros((3, 8), dtype=torch.int32)
    writes = assign_req_to_token_pool(
        _tensor([2, 0]), table, _tensor([1, 4]), _tensor([3, 7]), _tensor([11, 12, 13, 14, 15]), 2
    )
    assert table[2].tolist() == [0, 11, 12, 0, 0, 0, 0, 0]
    assert table[0].tolist() == [0, 0, 0, 0, 13, 14, 15, 0]
    assert table[1].tolist() == [0] * 8
    assert writes == [RowWrite(2, 1, (11, 12)), RowWrite(0, 4, (13, 14, 15))]


def test_negative_length_writes_nothing_and_shifts_later_rows_back() -> None:
    table = torch.zeros((3, 8), dtype=torch.int32)
    # Row 0: [0, 2) = 2 slots; row 1: [5, 3) = -2 (writes nothing); row 2: [0, 2) reads from
    # offset 2 - 2 = 0, i.e. row 0's own slots: two rows now point at the same slots.
    writes = assign_req_to_token_pool(
        _tensor([0, 1, 2]),
        table,
        _tensor([0, 5, 0]),
        _tensor([2, 3, 2]),
        _tensor([21, 22, 23, 24]),
        3,
    )
    assert table[0, :2].tolist() == [21, 22]
    assert table[1].tolist() == [0] * 8
    assert table[2, :2].tolist() == [21, 22]
    assert [w.row for w in writes] == [0, 2]


def test_negative_offset_before_the_buffer_is_out_of_bounds() -> None:
    table = torch.zeros((2, 8), dtype=torch.int32)
    with pytest.raises(KernelOutOfBounds, match="out_cache_loc"):
        assign_req_to_token_pool(
            _tensor([0, 1]), table, _tensor([4, 0]), _tensor([1, 2]), _tensor([5, 6]), 2
        )


def test_write_past_the_row_width_continues_in_the_next_row() -> None:
    table = torch.zeros((2, 4), dtype=torch.int32)
    writes = assign_req_to_token_pool(
        _tensor([0]), table, _tensor([3]), _tensor([6]), _tensor([7, 8, 9]), 1
    )
    assert table.tolist() == [[0, 0, 0, 7], [8, 9, 0, 0]]
    assert list(writes[0].flat_positions(4)) == [3, 4, 5]


def test_write_past_the_tensor_is_out_of_bounds() -> None:
    table = torch.zeros((1, 4), dtype=torch.int32)
    with pytest.raises(KernelOutOfBounds, match="outside req_to_token"):
        assign_req_to_token_pool(
            _tensor([0]), table, _tensor([3]), _tensor([5]), _tensor([1, 2]), 1
        )


def test_batch_size_limits_the_programs() -> None:
    table = torch.zeros((2, 4), dtype=torch.int32)
    assign_req_to_token_pool(
        _tensor([0, 1]), table, _tensor([0, 0]), _tensor([1, 1]), _tensor([5, 6]), 1
    )
    assert table.tolist() == [[5, 0, 0, 0], [0, 0, 0, 0]]


def test_last_loc_reads_the_slot_before_the_prefix_or_minus_one() -> None:
    table = torch.tensor([[4, 5, 6, 0], [8, 9, 0, 0]], dtype=torch.int32)
    got = last_loc(table, _tensor([1, 0, 0]), _tensor([2, 0, 3]))
    assert got.dtype == torch.int64
    assert got.tolist() == [9, -1, 6]


def test_last_loc_agrees_with_the_torch_formula_inside_rows() -> None:
    table = torch.arange(24, dtype=torch.int32).reshape(4, 6)
    rows, prefixes = _tensor([3, 1, 2, 0]), _tensor([6, 1, 0, 4])
    formula = torch.where(prefixes > 0, table[rows, prefixes - 1], torch.full_like(prefixes, -1))
    assert last_loc(table, rows, prefixes).tolist() == formula.tolist()


def test_last_loc_outside_the_tensor_is_out_of_bounds() -> None:
    table = torch.zeros((1, 4), dtype=torch.int32)
    with pytest.raises(KernelOutOfBounds):
        last_loc(table, _tensor([0]), _tensor([9]))


def _prefill(
    table: torch.Tensor, rows: list[int], seqs: list[int], extends: list[int], out: list[int]
) -> list[RowWrite]:
    zeros = _tensor([0] * len(rows))
    return write_req_to_token_pool(
        table,
        _tensor(rows),
        zeros,
        zeros,
        _tensor(seqs),
        _tensor(extends),
        _tensor(out),
        table.shape[1],
    )


def test_prefill_write_fills_each_row_from_the_extend_lengths_before_it() -> None:
    table = torch.zeros((3, 6), dtype=torch.int32)
    writes = _prefill(table, [2, 1], [2, 3], [2, 3], [11, 12, 13, 14, 15])
    assert table[2].tolist() == [11, 12, 0, 0, 0, 0]
    assert table[1].tolist() == [13, 14, 15, 0, 0, 0]
    assert writes == [RowWrite(2, 0, (11, 12)), RowWrite(1, 0, (13, 14, 15))]


def test_prefill_write_counts_from_seq_lens_and_offsets_from_extend_lens() -> None:
    # An extend length short by one moves the next row back onto the first row's last slot.
    table = torch.zeros((2, 4), dtype=torch.int32)
    _prefill(table, [0, 1], [2, 2], [1, 2], [5, 6, 7, 8])
    assert table[0, :2].tolist() == [5, 6]
    assert table[1, :2].tolist() == [6, 7]


def test_prefill_write_past_out_cache_loc_is_out_of_bounds() -> None:
    table = torch.zeros((2, 8), dtype=torch.int32)
    with pytest.raises(KernelOutOfBounds, match="out_cache_loc"):
        _prefill(table, [0], [4], [4], [1, 2, 3])


def test_prefill_write_of_a_prefix_is_kvchecks_gap() -> None:
    table = torch.zeros((2, 8), dtype=torch.int32)
    with pytest.raises(KernelUnsupported, match="prefix"):
        write_req_to_token_pool(
            table,
            _tensor([0]),
            _tensor([0]),
            _tensor([2]),
            _tensor([4]),
            _tensor([2]),
            _tensor([1, 2]),
            8,
        )
