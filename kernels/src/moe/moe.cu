// MoE routing bookkeeping. Deterministic: counts are integer sums (order
// free), and moe_scatter gives each expert one block that walks the pairs
// in increasing order with a block prefix sum, so a pair's slot never
// depends on scheduling.

#define MOE_SMEM_EXPERTS 1024

// Plan (kernels/src/moe/mod.rs): grid ceil(n/256), block 256; counts zeroed beforehand.
extern "C" __global__ void moe_count(int* counts, const int* topk_ids, int n, int e) {
    __shared__ int local[MOE_SMEM_EXPERTS];
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (e <= MOE_SMEM_EXPERTS) {
        // Block-local histogram first: one global atomic per expert per block
        // instead of one per pair.
        for (int x = threadIdx.x; x < e; x += blockDim.x) local[x] = 0;
        __syncthreads();
        if (p < n) {
            int x = topk_ids[p];
            if (x >= 0 && x < e) atomicAdd(&local[x], 1);
        }
        __syncthreads();
        for (int x = threadIdx.x; x < e; x += blockDim.x) {
            int c = local[x];
            if (c) atomicAdd(&counts[x], c);
        }
    } else if (p < n) {
        int x = topk_ids[p];
        if (x >= 0 && x < e) atomicAdd(&counts[x], 1);
    }
}

// Plan: grid 1, block 256. Exclusive prefix sum in blockDim-sized
// chunks with a running carry.
extern "C" __global__ void moe_offsets(int* offsets, int* cursor, const int* counts, int e) {
    __shared__ int scratch[32];
    int carry = 0;
    if (threadIdx.x == 0) offsets[0] = 0;
    for (int base = 0; base < e; base += blockDim.x) {
        const int x = base + threadIdx.x;
        const int c = x < e ? counts[x] : 0;
        int total;
        const int inc = block_inclusive_scan(c, scratch, &total);
        if (x < e) {
            offsets[x + 1] = carry + inc;
            cursor[x] = carry + inc - c;
        }
        carry += total;
    }
}

// Plan: grid [e], block 256: block x owns expert x.
extern "C" __global__ void moe_scatter(int* pair_of_slot, int* slot_of_pair, int* cursor, const int* offsets, const int* topk_ids, int n, int e) {
    __shared__ int scratch[32];
    const int x = blockIdx.x;
    if (x >= e) return;
    const int first = offsets[x];
    int found = 0;
    for (int base = 0; base < n; base += blockDim.x) {
        const int p = base + threadIdx.x;
        const int mine = (p < n && topk_ids[p] == x) ? 1 : 0;
        int total;
        const int inc = block_inclusive_scan(mine, scratch, &total);
        if (mine) {
            const int slot = first + found + inc - 1;
            // Guards memory against inconsistent offsets (a caller bug);
            // with offsets from moe_offsets every slot is in range.
            if (slot >= 0 && slot < n) {
                pair_of_slot[slot] = p;
                slot_of_pair[p] = slot;
            }
        }
        found += total;
    }
    if (threadIdx.x == 0) cursor[x] = first + found;
    if (x == 0) {
        // Pairs routed nowhere, and the slots past the last routed pair.
        for (int p = threadIdx.x; p < n; p += blockDim.x) {
            const int id = topk_ids[p];
            if (id < 0 || id >= e) slot_of_pair[p] = -1;
        }
        const int valid = offsets[e];
        for (int s = max(valid, 0) + threadIdx.x; s < n; s += blockDim.x) pair_of_slot[s] = -1;
    }
}
