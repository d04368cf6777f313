/* turbospark.c: command-line entry point; dispatches to tools/cli/cmd_*.c and tools/server/cmd_serve.c.
 * The command set and flags are the stable contract of design.md. Without a
 * command it prints the usage (a first contact should say what there is, not
 * start generating); every command answers --help with its options. */
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
    fprintf(f, "usage: turbospark COMMAND [options]   (turbospark COMMAND --help lists its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\nThe model is -m DIR (a Hugging Face checkpoint or an install made by convert); without it,\n"
               "$TURBOSPARK_MODEL, else the bundled models/default (under the working directory or next to\n"
               "the binary). Try: turbospark run -p \"Once upon a time\" -n 64\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "turbospark: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
