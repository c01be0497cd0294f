// Keeps libtorch_cuda.so in every binary that depends on tch-distributed.
//
// libtorch's CUDA support arrives through libtorch_cuda.so's static initializers (they
// register the CUDA hooks that torch::cuda::device_count() asks). A program that calls
// no symbol of that library directly (step 0, the demo, the checker) gets no DT_NEEDED
// entry for it under the linker's --as-needed, so it sees no GPU even on a GPU node.
// This object is linked whole (+whole-archive, see build.rs) into every binary, and its
// constructor refers to one symbol of libtorch_cuda.so: the linker must keep the
// library. Nothing CUDA runs here: the constructor only takes the symbol's address.

namespace at::cuda {
int warp_size();  // defined in libtorch_cuda.so (ATen/cuda/CUDAContextLight.h)
}

extern "C" {
// Volatile, so the compiler cannot drop the store and with it the reference.
void* volatile tchd_cuda_anchor = nullptr;

__attribute__((constructor, used)) static void tchd_keep_libtorch_cuda() {
    tchd_cuda_anchor = reinterpret_cast<void*>(&at::cuda::warp_size);
}
}
