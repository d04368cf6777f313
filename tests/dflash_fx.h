/* dflash_fx.h: a random DFlash drafter for a test fixture (tests/test_dflash.c
 * writes it; other groups use it too). */
#ifndef TS_TEST_DFLASH_FX_H
#define TS_TEST_DFLASH_FX_H

/* Writes a 2-layer random drafter (3 taps) for tests/fixtures/FX into the
 * test's temporary directory under NAME; returns its path (static buffer),
 * or NULL after reporting a failure. */
const char *ts_test_dflash_drafter(const char *fx, const char *name);

#endif
