/* cmd_template.c: `turbospark template (-m DIR | --template FILE.jinja) --request FILE.json`
 *
 * Renders one chat request with a model's chat template (or a template file)
 * and writes the prompt to stdout byte for byte, nothing appended: scripts
 * compare it with transformers' apply_chat_template(tokenize=False). The
 * request is {"messages", "tools"?, "add_generation_prompt"? (default true),
 * "chat_template_kwargs"?}. When the template refuses the request
 * (raise_exception) its message goes to stderr and the exit status is 1;
 * bad usage exits 2.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "turbospark.h"

static void template_usage(FILE *f) {
    fprintf(f,
            "usage: turbospark template (-m DIR | --template FILE.jinja) --request FILE.json\n"
            "  -m, --model DIR      model directory (chat_template.jinja or tokenizer_config.json)\n"
            "  --template FILE      a Jinja chat template file\n"
            "  --request FILE       JSON: {\"messages\": [...], \"tools\": [...], \"add_generation_prompt\": true,\n"
            "                       \"chat_template_kwargs\": {\"enable_thinking\": false}}  ('-' = stdin)\n"
            "prints the rendered prompt exactly (no trailing newline added)\n");
}


int cmd_template(int argc, char **argv) {
    const char *model = NULL, *tfile = NULL, *request = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { template_usage(stdout); return 0; }
        if (i + 1 >= argc) { fprintf(stderr, "turbospark template: %s needs a value\n", a); template_usage(stderr); return 2; }
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = argv[++i];
        else if (!strcmp(a, "--template")) tfile = argv[++i];
        else if (!strcmp(a, "--request")) request = argv[++i];
        else { fprintf(stderr, "turbospark template: unknown option %s\n", a); template_usage(stderr); return 2; }
    }
    if (!request || (!model && !tfile) || (model && tfile)) { template_usage(stderr); return 2; }

    ts_error err = {0};
    ts_chat_template *t = NULL;
    int rc;
    if (model) {
        rc = ts_chat_template_load(model, &t, &err);
    } else {
        size_t n;
        char *text = cli_read_file_len(tfile, &n);
        if (!text) { fprintf(stderr, "turbospark template: cannot read %s\n", tfile); return 1; }
        rc = ts_chat_template_parse(text, n, &t, &err);
        free(text);
    }
    if (rc) { fprintf(stderr, "turbospark template: %s\n", err.msg); return 1; }

    size_t rn;
    char *req = cli_read_file_len(request, &rn);
    if (!req) {
        fprintf(stderr, "turbospark template: cannot read %s\n", request);
        ts_chat_template_free(t);
        return 1;
    }
    char *out = NULL;
    size_t on = 0;
    rc = ts_chat_render_json(t, req, rn, &out, &on, &err);
    free(req);
    ts_chat_template_free(t);
    if (rc) { fprintf(stderr, "turbospark template: %s\n", err.msg); return 1; }
    size_t w = fwrite(out, 1, on, stdout);
    ts_chat_text_free(out);
    if (w != on || fflush(stdout) != 0) { fprintf(stderr, "turbospark template: write error\n"); return 1; }
    return 0;
}
