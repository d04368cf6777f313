/* cmd_stubs.c: weak placeholders for subcommands not built yet. A module that
 * implements a command defines the strong symbol in its own cmd_<name>.c. */
#include <stdio.h>

#include "cli.h"

#define STUB(name)                                                                 \
    __attribute__((weak)) int cmd_##name(int argc, char **argv) {                  \
        (void)argc; (void)argv;                                                    \
        fprintf(stderr, "turbospark " #name ": not available in this build yet\n"); \
        return 2;                                                                  \
    }
STUB(run)
STUB(chat)
STUB(logits)
STUB(tokenize)
STUB(template)
STUB(convert)
STUB(synth)
STUB(plan)
STUB(bench)
STUB(serve)
