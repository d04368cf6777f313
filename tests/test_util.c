/* test_util.c: allocator counting, fault injection, dtype conversions. */
#include "ts_int.h"
#include "ts_test.h"

TS_TEST(util, alloc_counts) {
    size_t before = ts_mem_used(TS_MEM_SCRATCH);
    void *p = ts_alloc(1000, TS_MEM_SCRATCH);
    CHECK(p != NULL);
    CHECK(((uintptr_t)p & 63) == 0);
    CHECK(ts_mem_used(TS_MEM_SCRATCH) == before + 1000);
    ts_free(p);
    CHECK(ts_mem_used(TS_MEM_SCRATCH) == before);
    ts_free(NULL);
}

TS_TEST(util, alloc_fault_injection) {
    ts_mem_fail_after(2);
    void *a = ts_alloc(8, TS_MEM_MISC);
    void *b = ts_alloc(8, TS_MEM_MISC);
    CHECK(a != NULL);
    CHECK(b == NULL);
    ts_free(a);
    void *c = ts_alloc(8, TS_MEM_MISC);
    CHECK(c != NULL);
    ts_free(c);
}

TS_TEST(util, bf16_f16_roundtrip) {
    float xs[] = {0.f, 1.f, -2.5f, 3.140625f, 65504.f, 1e-7f, -0.0f};
    for (unsigned i = 0; i < sizeof xs / sizeof xs[0]; i++) {
        float b = ts_bf16_to_f32(ts_f32_to_bf16(xs[i]));
        CHECK_MSG(fabsf(b - xs[i]) <= fabsf(xs[i]) * (1.f / 128), "bf16 %g -> %g", xs[i], b);
        float h = ts_f16_to_f32(ts_f32_to_f16(xs[i]));
        CHECK_MSG(fabsf(h - xs[i]) <= fabsf(xs[i]) * (1.f / 1024) + 1e-7f, "f16 %g -> %g", xs[i], h);
    }
    /* round-to-nearest-even on a tie: 1 + 2^-8 is halfway between bf16 neighbours */
    CHECK(ts_bf16_to_f32(ts_f32_to_bf16(1.00390625f)) == 1.0f);
    CHECK(ts_f32_to_bf16(1.01171875f) == ts_f32_to_bf16(1.015625f));
    /* every f16 bit pattern that is finite survives f16->f32->f16 */
    for (uint32_t u = 0; u < 0x10000; u++) {
        if (((u >> 10) & 0x1f) == 0x1f) continue;
        CHECK_MSG(ts_f32_to_f16(ts_f16_to_f32((uint16_t)u)) == u, "f16 pattern %04x", u);
    }
}
