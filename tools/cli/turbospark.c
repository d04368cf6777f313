/* turbospark.c: command-line entry point; dispatches to tools/cli/cmd_*.c and tools/server/cmd_serve.c.
 * The command set and flags are the stable contract of design.md. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

typedef struct { const char *name; int (*fn)(int, char **); const char *help; } command;

static const command commands[] = {
    {"run", cmd_run, "generate text or ids from a prompt"},
    {"chat", cmd_chat, "interactive chat with line editing and history"},
    {"logits", cmd_logits, "write raw f32 logits for a list of ids"},
    {"tokenize", cmd_tokenize, "print the token ids of a text"},
    {"template", cmd_template, "render a chat request with the checkpoint's template"},
    {"convert", cmd_convert, "quantize a checkpoint to an INT4/INT8 install"},
    {"synth", cmd_synth, "write a random-weight checkpoint of a given shape"},
    {"plan", cmd_plan, "print the memory plan for a model and options"},
    {"perplexity", cmd_perplexity, "held-out perplexity (and MTP agreement) over id windows"},
    {"bench", cmd_bench, "measure prefill/decode speed and bandwidth"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: turbospark COMMAND [options]   (turbospark COMMAND --help)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        /* No command: run the default model, as the README's first command does. */
        char *def[] = {"run", NULL};
        return cmd_run(1, def);
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "turbospark: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
