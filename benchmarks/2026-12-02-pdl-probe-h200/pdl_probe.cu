// Does programmatic dependent launch overlap kernels inside a CUDA graph made
// by stream capture, and what does it save on a decode-shaped chain?
// nvcc -O3 -arch=sm_90 pdl_probe.cu -o pdl_probe
#include <cstdio>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

__device__ __forceinline__ unsigned long long gtime() { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }

// Reads n 16-byte words (the weights); the loads before the wait when early = 1.
__global__ void stream(const uint4* __restrict__ w, size_t n, unsigned* out, int early) {
    asm volatile("griddepcontrol.launch_dependents;");
    if (!early) asm volatile("griddepcontrol.wait;" ::: "memory");
    unsigned acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint4 v;
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(w + i));
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (early) asm volatile("griddepcontrol.wait;" ::: "memory");
    if (acc == 0x9e3779b9u) out[0] = acc;
}
// A latency-bound step (norm, rope, short attention): a few blocks, a little work.
__global__ void small(unsigned* buf) {
    asm volatile("griddepcontrol.launch_dependents;");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    unsigned v = buf[threadIdx.x];
    for (int i = 0; i < 64; ++i) v = v * 1664525u + 1013904223u;
    buf[threadIdx.x] = v;
}
__global__ void spin(unsigned long long* t, unsigned ns) {
    asm volatile("griddepcontrol.launch_dependents;");
    unsigned long long t0 = gtime();
    while (gtime() - t0 < ns) {}
    __syncthreads();
    if (threadIdx.x == 0) atomicMax(&t[0], gtime());
}
__global__ void probe(unsigned long long* t) {
    unsigned long long s = gtime();
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (threadIdx.x == 0 && blockIdx.x == 0) { t[1] = s; t[2] = gtime(); }
}

template <class K, class... A>
cudaError_t launch(bool pdl, dim3 g, dim3 b, cudaStream_t s, K k, A... a) {
    cudaLaunchConfig_t c = {};
    c.gridDim = g; c.blockDim = b; c.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    c.attrs = at; c.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&c, k, a...);
}

int main() {
    int drv = 0, rt = 0, sms = 0;
    cudaDriverGetVersion(&drv); cudaRuntimeGetVersion(&rt); cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    printf("driver %d runtime %d sms %d\n", drv, rt, sms);
    cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    unsigned long long* t; CK(cudaMalloc(&t, 64));
    // 1. overlap: spin 50 us, then a dependent probe; eager and captured.
    for (int graph = 0; graph < 2; ++graph)
        for (int pdl = 0; pdl < 2; ++pdl) {
            CK(cudaMemset(t, 0, 64));
            cudaGraphExec_t ex = nullptr;
            if (graph) CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
            CK(launch(false, dim3(sms), dim3(128), s, spin, t, 50000u));
            CK(launch(pdl, dim3(sms), dim3(128), s, probe, t));
            if (graph) { cudaGraph_t g; CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ex, g, 0)); CK(cudaMemset(t, 0, 64)); CK(cudaGraphLaunch(ex, s)); }
            CK(cudaStreamSynchronize(s));
            unsigned long long h[3]; CK(cudaMemcpy(h, t, 24, cudaMemcpyDeviceToHost));
            printf("%s pdl %d: probe started %+.2f us after the spin ended; its wait returned %+.2f us after\n", graph ? "graph" : "eager", pdl,
                   ((double)h[1] - (double)h[0]) / 1e3, ((double)h[2] - (double)h[0]) / 1e3);
        }
    // 2. a decode-shaped chain: per layer 21, (small x2), 10.5, small, 105, 52 MB; 30 layers; then 1.34 GB.
    const size_t mb = 1 << 20;
    const size_t sizes[] = {21 * mb, 0, 0, 10 * mb + mb / 2, 0, 105 * mb, 52 * mb};
    uint4* w; CK(cudaMalloc(&w, 1400 * mb)); CK(cudaMemset(w, 1, 1400 * mb));
    unsigned* buf; CK(cudaMalloc(&buf, 4096)); CK(cudaMemset(buf, 0, 4096));
    for (int mode = 0; mode < 3; ++mode) { // 0: no PDL, 1: PDL with loads after the wait, 2: PDL with loads before it
        cudaGraph_t g; cudaGraphExec_t ex;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
        size_t off = 0;
        for (int l = 0; l < 30; ++l)
            for (size_t z : sizes) {
                if (z == 0) CK(launch(mode > 0, dim3(8), dim3(256), s, small, buf));
                else {
                    if (off + z > 1300 * mb) off = 0;
                    CK(launch(mode > 0, dim3(2 * sms), dim3(512), s, stream, w + off / 16, z / 16, buf, mode == 2 ? 1 : 0));
                    off += z;
                }
            }
        CK(launch(mode > 0, dim3(2 * sms), dim3(512), s, stream, w, (size_t)1340 * mb / 16, buf, mode == 2 ? 1 : 0));
        CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ex, g, 0));
        for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(ex, s));
        cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
        CK(cudaEventRecord(a, s));
        for (int i = 0; i < 20; ++i) CK(cudaGraphLaunch(ex, s));
        CK(cudaEventRecord(b, s)); CK(cudaEventSynchronize(b));
        float ms; cudaEventElapsedTime(&ms, a, b);
        const double bytes = 30.0 * (21 + 10.5 + 105 + 52) * mb + 1340.0 * mb;
        printf("chain (%s): %.3f ms a step, %.0f GB/s over the stream bytes\n", mode == 0 ? "no PDL" : mode == 1 ? "PDL, loads after the wait" : "PDL, loads before the wait",
               ms / 20, bytes / (ms / 20 * 1e-3) / 1e9);
    }
    // 3. the same chain without the small kernels: what the small steps cost.
    return 0;
}
