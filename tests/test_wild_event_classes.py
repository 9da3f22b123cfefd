"""One definition per event class (issue 8): the category table and the communication-only time
agree on which kernels are communication, and every analysis reads the same category lists."""

from __future__ import annotations

import pytest
from gpuscope.analysis import (
    event_classes,
    idle,
    kernel_names,
    kernels,
    rank_index,
    store_access,
)
from gpuscope.analysis.kernels import classify_kernel
from gpuscope.analysis.report import analyze_run
from gpuscope.ingest.loader import ingest_paths
from tracegen import TraceBuilder

pytestmark = pytest.mark.memory_store  # `con` is an in-memory store (tests/conftest.py)

COMM_NAMES = [
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "ncclDevKernel_AllReduce_Sum_bf16_NVLS(ncclDevKernelArgsStorage<4096ul>)",
    "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)",
    "void c10d::symmetric_memory::multimem_all_reduce_kernel<__nv_bfloat16, 16, 8>(__nv_bfloat16*, unsigned long, unsigned long, c10d::symmetric_memory::SymmetricMemory*)",
    "void c10d::symmetric_memory::one_shot_all_reduce_kernel<float, 16, 8>(float**, float*, unsigned long, unsigned long, unsigned long, unsigned long)",
    "void c10d::symmetric_memory::two_shot_all_reduce_kernel<__nv_bfloat16, 16, 8>(__nv_bfloat16**, unsigned long, unsigned long, unsigned long)",
    "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, __nv_bfloat16*, int, int)",
    "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*)",
    "rcclGenericKernel<1, false>(ncclDevComm*, unsigned long, ncclWork*)",
]
NOT_COMM = [
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4>)",
    "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_NNT",
    "triton_poi_fused_add_0",
    "volta_scudnn_128x64_relu_interior_nn_v1",
]


@pytest.mark.slow
@pytest.mark.parametrize("name", COMM_NAMES + NOT_COMM)
def test_category_table_and_comm_only_sql_agree(con, name):
    is_comm = name in COMM_NAMES
    assert (classify_kernel(name) == "communication") is is_comm
    assert event_classes.is_comm_kernel(name) is is_comm
    sql = con.execute("SELECT regexp_matches(?, ?)", [name, store_access.COMM_KERNEL_RE]).fetchone()
    assert sql[0] is is_comm


def test_one_definition_of_each_class():
    assert store_access.GPU_CATS is event_classes.GPU_CATS
    assert kernels.COPY_CATS is kernel_names.COPY_CATS is event_classes.COPY_CATS
    assert store_access.RUNTIME_CATS is event_classes.RUNTIME_CATS
    assert kernels.OP_CATS is event_classes.OP_CATS
    # the comm kernels' name ids are read in one place (RankIndex.comm_name_ids)
    assert rank_index.COMM_KERNEL_RE is store_access.COMM_KERNEL_RE
    assert store_access.COMM_KERNEL_RE == event_classes.COMM_KERNEL_SQL_RE
    assert kernels.CATEGORY_RULES[0].pattern is event_classes.COMM_KERNEL_PATTERN
    for name in ("PROFILER_STEP_RE", "OPTIMIZER_RE", "DATALOADER_RE", "COMM_RE", "SYNC_APIS"):
        assert getattr(store_access, name) is getattr(event_classes, name)
    assert idle.CAUSES is event_classes.CAUSES
    assert set(event_classes.GPU_CATS) == set(event_classes.KERNEL_CATS + event_classes.COPY_CATS)


def test_multimem_all_reduce_is_communication_everywhere(con, tmp_path):
    """A symmetric-memory all-reduce alone on the GPU for 30 µs: communication in the category
    table, and those 30 µs are communication-only time."""
    b = TraceBuilder()
    b.step(1, 0, 200)
    b.launch("void at::native::vectorized_elementwise_kernel<4, add>(int)", 5, 10, 40)  # 10..50
    b.launch(
        "void c10d::symmetric_memory::multimem_all_reduce_kernel<__nv_bfloat16, 16, 8>(...)",
        20,
        30,
        50,
        stream=9,
    )  # 30..80: alone from 50 to 80
    path = b.write(tmp_path / "symm.json")
    run_id = ingest_paths(con, [path])[0].run_id
    doc = analyze_run(con, run_id).to_json()
    assert doc["kernels"]["by_category"]["communication"] == pytest.approx(50)
    assert doc["busy"]["comm_only_us"] == pytest.approx(30)
