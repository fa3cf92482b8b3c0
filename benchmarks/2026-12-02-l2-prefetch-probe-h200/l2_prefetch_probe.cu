// Does an L2 prefetch of the next weight streams, issued while a layer's
// latency-bound kernels (qkv_prep, decode attention, the sandwich norm) leave
// DRAM idle, shorten a decode-shaped chain in one captured graph?
// nvcc -O3 -arch=sm_90 l2_prefetch_probe.cu -o l2_prefetch_probe
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)

// Reads n 16-byte words (a GEMV's weights), loads before the PDL wait.
__global__ void stream(const uint4* __restrict__ w, size_t n, unsigned* out) {
    asm volatile("griddepcontrol.launch_dependents;");
    unsigned acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint4 v;
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(w + i));
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (acc == 0x9e3779b9u) out[0] = acc;
}
// A latency-bound step: `blocks` blocks, each thread a chain of `hops`
// dependent loads through a permutation of a 64 MB pool (DRAM latency each).
__global__ void chase(const unsigned* __restrict__ perm, unsigned mask, int hops, unsigned* out) {
    asm volatile("griddepcontrol.launch_dependents;");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    unsigned i = (blockIdx.x * blockDim.x + threadIdx.x) * 7919u & mask;
    for (int h = 0; h < hops; ++h) i = __ldcg(perm + i);
    if (i == 0xffffffffu) out[1] = i;
}
// Asks L2 for `bytes` at `p`, 16 KB a request, spread over every SM (one SM's bulk
// copy engine alone moved about 0.3 TB/s, and the kernel retires only when its requests have), and exits: the copies go on
// in the memory system after the kernel has retired.
__global__ void prefetch(const char* p, size_t bytes) {
    asm volatile("griddepcontrol.launch_dependents;");
    const size_t chunk = 16384;
    for (size_t off = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * chunk; off < bytes; off += (size_t)gridDim.x * blockDim.x * chunk) {
        const unsigned n = (unsigned)(bytes - off < chunk ? bytes - off : chunk);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off), "r"(n) : "memory");
    }
}

template <class K, class... A>
void launch(dim3 g, dim3 b, cudaStream_t s, K k, A... a) {
    cudaLaunchConfig_t c = {};
    c.gridDim = g; c.blockDim = b; c.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    c.attrs = at; c.numAttrs = 1;
    CK(cudaLaunchKernelEx(&c, k, a...));
}

int main(int argc, char** argv) {
    int sms = 0; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    int l2 = 0; cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0);
    printf("sms %d, L2 %d MB\n", sms, l2 >> 20);
    cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const size_t mb = 1 << 20;
    const size_t total = 7000 * mb; // 30 layers of 188.5 MB + the 1.34 GB head, no reuse across a step
    char* w; CK(cudaMalloc(&w, total)); CK(cudaMemset(w, 1, total));
    const unsigned pool = 16u << 20; // 64 MB of u32
    std::vector<unsigned> h(pool);
    for (unsigned i = 0; i < pool; ++i) h[i] = i;
    srand(7);
    for (unsigned i = pool - 1; i > 0; --i) { unsigned j = ((unsigned)rand() * 2654435761u) % (i + 1); unsigned t = h[i]; h[i] = h[j]; h[j] = t; }
    unsigned* perm; CK(cudaMalloc(&perm, pool * 4ull)); CK(cudaMemcpy(perm, h.data(), pool * 4ull, cudaMemcpyHostToDevice));
    unsigned* out; CK(cudaMalloc(&out, 64));
    // mode: 4 as 3 on a forked branch; 0 none; 1 o_proj before qkv_prep; 2 + gate_up's first G MB before the sandwich norm; 3 all in one before qkv_prep
    const int hops_attn = argc > 1 ? atoi(argv[1]) : 12, hops_small = argc > 2 ? atoi(argv[2]) : 4;
    const double gs[] = {0, 8, 16, 24, 32, 48};
    printf("chase hops: attention %d, small %d\n", hops_attn, hops_small);
    cudaStream_t s2; CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    cudaEvent_t fork, join; CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming)); CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    for (int mode = 0; mode < 5; ++mode)
        for (double gmb : gs) {
            if ((mode < 2) != (gmb == 0)) continue;
            if (mode == 1 || mode == 2 || (mode == 3 && gmb != 16)) continue;
            cudaGraph_t g; cudaGraphExec_t ex;
            CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
            size_t off = 0;
            for (int l = 0; l < 30; ++l) {
                const size_t qkv = off, o = qkv + 21 * mb, gu = o + 10 * mb + mb / 2, dn = gu + 105 * mb;
                off = dn + 52 * mb;
                const size_t g0 = (size_t)(gmb * mb);
                launch(dim3(2 * sms), dim3(512), s, stream, (const uint4*)(w + qkv), 21 * mb / 16, out);
                if (mode == 1 || mode == 2) launch(dim3(sms), dim3(32), s, prefetch, (const char*)(w + o), 10 * mb + mb / 2);
                if (mode == 3) launch(dim3(sms), dim3(32), s, prefetch, (const char*)(w + o), 10 * mb + mb / 2 + g0);
                if (mode == 4) { // forked: a branch of the graph beside qkv_prep and attention, joined at the layer's end
                    CK(cudaEventRecord(fork, s)); CK(cudaStreamWaitEvent(s2, fork, 0));
                    launch(dim3(sms), dim3(32), s2, prefetch, (const char*)(w + o), 10 * mb + mb / 2 + g0);
                    CK(cudaEventRecord(join, s2));
                }
                launch(dim3(8), dim3(256), s, chase, perm, pool - 1, hops_small, out);      // qkv_prep
                launch(dim3(16), dim3(128), s, chase, perm, pool - 1, hops_attn, out);      // attention
                launch(dim3(2 * sms), dim3(512), s, stream, (const uint4*)(w + o), (10 * mb + mb / 2) / 16, out);
                if (mode == 2) launch(dim3(sms), dim3(32), s, prefetch, (const char*)(w + gu), g0);
                launch(dim3(8), dim3(256), s, chase, perm, pool - 1, hops_small, out);      // sandwich norm
                launch(dim3(2 * sms), dim3(512), s, stream, (const uint4*)(w + gu), 105 * mb / 16, out);
                launch(dim3(2 * sms), dim3(512), s, stream, (const uint4*)(w + dn), 52 * mb / 16, out);
                if (mode == 4) CK(cudaStreamWaitEvent(s, join, 0));
            }
            launch(dim3(2 * sms), dim3(512), s, stream, (const uint4*)(w + off), 1340 * mb / 16, out);
            CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ex, g, 0));
            for (int i = 0; i < 5; ++i) CK(cudaGraphLaunch(ex, s));
            cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
            float best = 1e9;
            for (int r = 0; r < 3; ++r) {
                CK(cudaEventRecord(a, s));
                for (int i = 0; i < 20; ++i) CK(cudaGraphLaunch(ex, s));
                CK(cudaEventRecord(b, s)); CK(cudaEventSynchronize(b));
                float ms; cudaEventElapsedTime(&ms, a, b);
                if (ms < best) best = ms;
            }
            const double bytes = 30.0 * (21 + 10.5 + 105 + 52) * mb + 1340.0 * mb;
            printf("mode %d gate_up prefetch %4.0f MB: %.3f ms a step, %.0f GB/s over the stream bytes\n", mode, gmb, best / 20, bytes / (best / 20 * 1e-3) / 1e9);
            CK(cudaGraphExecDestroy(ex)); CK(cudaGraphDestroy(g));
        }
    // The chase kernels alone (their latency, idle DRAM) and under a prefetch.
    return 0;
}
