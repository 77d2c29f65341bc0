"""The benchmarks' byte count (benchmarks/common/_traffic.py) against counts made by hand on small cases."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "common"))
from _traffic import gb_cell, liger_chunk_rows, step_bytes  # noqa: E402

SMALL = dict(n=4, hidden=3, vocab=5)  # (rows, V) = 20 entries, (V, H) = 15


# the kernels' passes until 1c2c93d
BEFORE = dict(zeroes_dw=True, bias_in_kernel=False, grad_in_gemm_dtype=False, unit_d_loss_skipped=False)


def test_hf_heads_triton_under_bf16_autocast_by_hand():
    """Two chunks of 2 rows, bf16 products, float32 master W, bias, float32 workspace, d W added in the GEMM, the
    backward scaling by d loss: the kernels' passes as they are, and as they were (`BEFORE`)."""
    got = step_bytes("hf_heads-triton", **SMALL, gemm=2, weight=4, chunk_rows=2, scales_by_grad_out=True)
    # (V, H): W to bf16 15·(4+2); W read by 2 chunks x 2 GEMMs 4·15·2; the first chunk writes the accumulator 15·4,
    # the second reads and writes it 2·15·4; d loss = 1 read on the device: no pass; into .grad 3·15·4
    assert got["(V, H)"] == 90 + 120 + 60 + 120 + 180
    multiplied = step_bytes(
        "hf_heads-triton", **SMALL, gemm=2, weight=4, chunk_rows=2, scales_by_grad_out=True, unit_d_loss_skipped=False
    )
    assert multiplied["(V, H)"] == got["(V, H)"] + 2 * 15 * 4  # d W times d loss, in place
    assert multiplied["(rows, V)"] == got["(rows, V)"]
    # (rows, V): half product 20·2; cast to float32 20·6; Triton reads the float32 logits twice and writes a bf16
    # gradient 20·10 (bias inside); d b from it 20·2; two GEMMs read it 2·20·2
    assert got["(rows, V)"] == 40 + 120 + 200 + 40 + 80
    assert got["total"] == 570 + 480
    items = {k: v for k, v in got.items() if ": " in k}
    assert sum(items.values()) == got["total"]
    direct = step_bytes("hf_heads-triton", **SMALL, gemm=2, weight=4, chunk_rows=2, gemm_writes_float32=True)
    assert direct["(rows, V)"] == 20 * 4 + 200 + 40 + 80  # the GEMM writes float32 logits: no half copy, no cast
    before = step_bytes("hf_heads-triton", **SMALL, gemm=2, weight=4, chunk_rows=2, scales_by_grad_out=True, **BEFORE)
    # (V, H): the accumulator zeroed 15·4 and both chunks read and write it 2·2·15·4
    assert before["(V, H)"] == 90 + 120 + 60 + 240 + 120 + 180
    # (rows, V): + b (read, write) 20·8; Triton writes a float32 gradient 20·12; d b 20·4; d z to bf16 20·6
    assert before["(rows, V)"] == 40 + 120 + 160 + 240 + 80 + 120 + 80


def test_each_kernel_change_moves_fewer_bytes_at_the_gemma_sized_row():
    """At N = 8192, H = 2304, V = 256k under bf16 autocast (float32 master weights, a bias, the backward scaling by
    d loss): each change of the kernels' passes, applied in turn, lowers the Triton kernel's count, and so does the
    accelerator's chunk size (1024 rows, hf_heads.losses.chunks.rows_per_chunk) against the CPU's 512."""
    from hf_heads.losses.chunks import rows_per_chunk

    gemma = dict(n=8192, hidden=2304, vocab=256_000, gemm=2, weight=4, scales_by_grad_out=True)
    steps = [
        dict(chunk_rows=512, **BEFORE),
        dict(chunk_rows=512, bias_in_kernel=False, grad_in_gemm_dtype=False),  # d W written by the first chunk
        dict(chunk_rows=512, grad_in_gemm_dtype=False),  # s ∘ z + b inside the row program
        dict(chunk_rows=512),
        dict(chunk_rows=512, gemm_writes_float32=True),
        dict(chunk_rows=rows_per_chunk(8192, 256_000, device="cuda"), gemm_writes_float32=True),
    ]
    totals = [step_bytes("hf_heads-triton", **gemma, **kw)["total"] for kw in steps]
    assert all(later < earlier for earlier, later in zip(totals[:-1], totals[1:], strict=True)), totals
    assert totals[-1] < 0.55 * totals[0]  # 219 GB -> 112 GB by this count


def test_triton_half_keeps_the_logits_in_bf16():
    got = step_bytes("hf_heads-triton-half", **SMALL, gemm=2, weight=4, chunk_rows=2, bias=False)
    # GEMM writes bf16 20·2; Triton 3 passes 20·6; two GEMMs read d z 20·4: no cast either way
    assert got["(rows, V)"] == 40 + 120 + 80


def test_naive_autocast_and_transformers_upcast_by_hand():
    naive = step_bytes("naive", **SMALL, gemm=2, weight=4, autocast_log_softmax=True)
    # (V, H): W to bf16 15·6; forward and d h GEMMs read it 2·15·2; d W written 15·2, cast back 15·6; .grad 3·15·4
    assert naive["(V, H)"] == 90 + 60 + 30 + 90 + 180
    # (rows, V): logits 20·2; log_softmax bf16 -> float32 20·6; zeroed gradient 20·4; its backward reads two
    # float32 blocks and writes bf16 20·10; two GEMMs read d z 20·4; d b 20·2
    assert naive["(rows, V)"] == 40 + 120 + 80 + 200 + 80 + 40
    upcast = step_bytes("naive-upcast", **SMALL, gemm=2, weight=4, autocast_log_softmax=True)
    # + the float32 copy 20·6 and its backward 20·6; log_softmax float32 -> float32 20·8; its backward all float32
    assert upcast["(rows, V)"] == 40 + 120 + 160 + 80 + 240 + 120 + 80 + 40


def test_floor_liger_and_cce():
    floor = step_bytes("floor", **SMALL, gemm=2)
    assert (floor["(rows, V)"], floor["(V, H)"]) == (3 * 20 * 2, 3 * 15 * 2)
    liger = step_bytes("liger", **SMALL, gemm=2, weight=2, chunk_rows=2, bias=False)
    # W read by 2 chunks x 2 GEMMs 4·15·2; d W zeroed 15·2 and added per chunk 2·2·15·2; .grad 3·15·2
    assert liger["(V, H)"] == 120 + 30 + 120 + 90
    assert liger["(rows, V)"] == 20 * 2 + 3 * 20 * 2 + 2 * 20 * 2
    cce = step_bytes("cce", **SMALL, gemm=2, weight=2, bias=False)
    assert (cce["(rows, V)"], cce["(V, H)"]) == (0, 2 * 30 + 3 * 30 + 3 * 30)
    assert liger_chunk_rows(8192, 2304, 256_000) == 128  # next_power_of_2(ceil(8192 / ceil(256000 / 2304)))


def test_frozen_weight_and_cell():
    frozen = step_bytes("hf_heads-eager", **SMALL, frozen=True, bias=False)
    assert frozen["(V, H)"] == 2 * 15 * 4  # W read by the two GEMMs of the one chunk, no gradient
    assert gb_cell({"total": 3e9, "(rows, V)": 1e9, "(V, H)": 2e9}) == "3 (1 + 2)" and gb_cell(None) == "—"
    with pytest.raises(ValueError, match="impl="):
        step_bytes("nope", **SMALL)


def test_a_half_weights_gradient_scaled_while_rounded_and_a_word_norms_passes_by_hand():
    """bf16 W, no bias, two chunks of 2 rows, the backward scaling by d loss: the float32 d W scaled and rounded to
    bf16 in one pass (before: a cast, then a bf16 pass); a word norm's (V, H) passes with float32 master W, its
    column scale applied to d W in the d loss pass (before: a pass of its own)."""
    half = dict(**SMALL, gemm=2, weight=2, chunk_rows=2, bias=False, scales_by_grad_out=True)
    got = step_bytes("hf_heads-triton-half", **half)
    # (V, H): W read by 2 chunks x 2 GEMMs 4·15·2; the first chunk writes the float32 accumulator 15·4, the second
    # adds into it 15·8; scaled and rounded to bf16 15·(4+2); into .grad 3·15·2
    assert got["(V, H)"] == 120 + 60 + 120 + 90 + 90
    before = step_bytes("hf_heads-triton-half", **half, rounds_while_scaling=False)
    assert before["(V, H)"] == got["(V, H)"] - 90 + 15 * 6 + 15 * 4  # cast 15·(4+2), then scaled in bf16 15·(2+2)
    plain = dict(**SMALL, gemm=2, weight=4, chunk_rows=2, scales_by_grad_out=True)
    margin, softmax = step_bytes("hf_heads-triton", **plain, word_norm=True), step_bytes("hf_heads-triton", **plain)
    # ‖W_c‖ 15·4; d s reads A and W 15·8; d‖W_c‖ ∘ W into d W 15·12; d loss · s ∘ A in one pass 15·8 (softmax's
    # d loss = 1: none on the device)
    assert margin["(V, H)"] - softmax["(V, H)"] == 60 + 120 + 180 + 120
    before = step_bytes(
        "hf_heads-triton", **plain, word_norm=True, rounds_while_scaling=False, unit_d_loss_skipped=False
    )
    assert before["(V, H)"] == margin["(V, H)"] + 15 * 8  # s ∘ A in place, a pass of its own
    assert margin["(rows, V)"] - softmax["(rows, V)"] == 20 * 2 * 2  # d z ∘ s for d h, in bf16


def test_a_memory_budget_cuts_the_weight_side_at_the_gemma_sized_row():
    """N = 8192, H = 2304, V = 256k under bf16: memory_budget=2048 (MiB) gives the half-logits kernel two chunks of
    4194 rows or fewer (hf_heads.losses.chunks.rows_per_chunk), which move under 25 GB over (V, H) with bf16 weights
    (the default 1024-row chunks: 61 GB) and 22 GB with float32 master weights (65 GB; 27 and 70 GB with the d loss
    pass a device-side read of d loss = 1 saves); a float32 workspace gets half the rows."""
    from hf_heads.losses.chunks import rows_per_chunk

    budget = 2048 << 20
    rows = rows_per_chunk(8192, 256_000, budget, itemsize=2, device="cuda")
    assert rows == budget // (2 * 256_000) == 4194 and rows_per_chunk(8192, 256_000, budget, device="cuda") == 2097
    gemma = dict(n=8192, hidden=2304, vocab=256_000, gemm=2, scales_by_grad_out=True)
    half_weights = dict(**gemma, weight=2, bias=False)
    by_budget = step_bytes("hf_heads-triton-half", **half_weights, chunk_rows=rows)["(V, H)"]
    default = step_bytes("hf_heads-triton-half", **half_weights, chunk_rows=1024)["(V, H)"]
    assert by_budget < 25e9 < 60e9 < default
    master = [step_bytes("hf_heads-triton-half", **gemma, weight=4, chunk_rows=r)["(V, H)"] for r in (rows, 1024)]
    assert 22e9 < master[0] < 23e9 < 25e9 < 64e9 < master[1] < 66e9
    multiplied = [
        step_bytes("hf_heads-triton-half", **gemma, weight=4, chunk_rows=r, unit_d_loss_skipped=False)["(V, H)"]
        for r in (rows, 1024)
    ]
    assert [m - x for m, x in zip(multiplied, master, strict=True)] == [2 * 4 * 256_000 * 2304] * 2


def test_a_sparse_heads_gathered_rows_by_hand():
    """top_k = 2 < V = 5, two chunks of 2 rows: the logits GEMM per chunk and torch.topk over the float32 block, then
    d h and d W through the k + 1 = 3 gathered rows of W per token (4 · 3 · 3 = 36 entries), every kernel alike; a
    k that keeps every class is the dense path."""
    bf16 = step_bytes("hf_heads-triton", **SMALL, gemm=2, weight=4, chunk_rows=2, scales_by_grad_out=True, top_k=2)
    # (V, H): W to bf16 15·6; W read by 2 logits GEMMs 2·15·2; the rows gathered, written and read by the bmm 3·36·2;
    # the accumulator zeroed 15·4; the (N, 3, H) products written, read and added into their rows 4·36·4; d loss = 1
    # read on the device: no pass; into .grad 3·15·4
    assert bf16["(V, H)"] == 90 + 60 + 216 + 60 + 576 + 180
    # (rows, V): half product 20·2, cast to float32 20·6, + b 20·8, topk reads it 20·4
    assert bf16["(rows, V)"] == 40 + 120 + 160 + 80
    fp32 = step_bytes("hf_heads-eager", **SMALL, chunk_rows=2, top_k=2)
    assert fp32["(V, H)"] == 2 * 15 * 4 + 3 * 36 * 4 + 15 * 4 + 4 * 36 * 4 + 3 * 15 * 4  # no cast, no d loss pass
    assert fp32["(rows, V)"] == 20 * 4 + 20 * 8 + 20 * 4
    assert step_bytes("hf_heads-eager", **SMALL, chunk_rows=2, top_k=5) == step_bytes(
        "hf_heads-eager", **SMALL, chunk_rows=2
    )
    gemma = dict(n=8192, hidden=2304, vocab=256_000, gemm=2, weight=4, scales_by_grad_out=True)
    sparse = step_bytes("hf_heads-triton", **gemma, chunk_rows=1024, gemm_writes_float32=True, top_k=20)
    dense = step_bytes("hf_heads-triton", **gemma, chunk_rows=1024, gemm_writes_float32=True)
    assert sparse["total"] < 0.65 * dense["total"]  # one (rows, V) x (V, H) GEMM per chunk instead of three
