// Utility kernels (plan: copy_u32 grid [ceil(n/1024)], block 256).

// Each thread moves one 16-byte vector when both pointers allow it; the tail
// and unaligned buffers go word by word.
extern "C" __global__ void __launch_bounds__(256) copy_u32(unsigned* __restrict__ out, const unsigned* __restrict__ inp, unsigned n) {
    const size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t i = t * 4;
    if (i >= n) return;
    if (i + 4 <= n && ((reinterpret_cast<size_t>(out) | reinterpret_cast<size_t>(inp)) & 15) == 0) {
        reinterpret_cast<uint4*>(out)[t] = reinterpret_cast<const uint4*>(inp)[t];
    } else {
        for (size_t j = i; j < i + 4 && j < n; ++j) out[j] = inp[j];
    }
}
