/* libfuzzer.c: the libFuzzer entry point of one harness (make fuzz compiles
 * this once per harness with -DFUZZ_ENTRY=fuzz_NAME; see fuzz.h). Not part
 * of the test suite. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FUZZ_ENTRY(data, size);
    return 0;
}
