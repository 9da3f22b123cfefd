# Sourced from the repository root by the recorders' device scripts (record_*_device.sh), on a
# machine where gpuscope is not installed: NVLink multicast off (the device notes' KINDS.md), Python
# unbuffered (the logs follow the run), and gpuscope.capture importable through a throw-away
# package whose __path__ is app/ plus the root (as ../multi_gpu/README.md). Exports PYTHONPATH.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
_gpuscope_root=$PWD
_gpuscope_pkg=$(mktemp -d)
mkdir "$_gpuscope_pkg/gpuscope"
echo "__path__=['$_gpuscope_root/app','$_gpuscope_root'];exec(open('$_gpuscope_root/app/__init__.py').read())" \
    >"$_gpuscope_pkg/gpuscope/__init__.py"
export PYTHONPATH=$_gpuscope_pkg
