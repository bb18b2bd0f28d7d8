# Build-time stub, never installed: arctic_inference's setup.py imports torch only for
# torch.utils.cmake_prefix_path (unused by the suffix-decoding CMakeLists) and
# torch.cuda.is_available() (only with ARCTIC_MINIMAL_BUILD). bench/gpu/arctic/build_wheel.sh
# puts this folder on PYTHONPATH while the wheel builds.
import types as _t

utils = _t.SimpleNamespace(cmake_prefix_path="/nonexistent-torch-cmake")


class _Cuda:
    @staticmethod
    def is_available() -> bool:
        return False


cuda = _Cuda()
