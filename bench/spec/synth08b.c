/* synth08b.c: write a random-weight checkpoint with the shapes of
 * Qwen3.5-0.8B (model-spec.md §5.1), linear weights INT4 in the MLX layout
 * (U32-packed values, bf16 per-64-column scales and biases), MTP head
 * included. For benchmarks of the speculative path only: the weights are
 * noise, so acceptance rates mean nothing, but every matrix has the real
 * size, so time per step does.
 *
 *   cc -O2 -o synth08b bench/spec/synth08b.c && ./synth08b OUTDIR
 *
 * Stand-in for `turbospark synth` (another branch) until that lands.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { H = 1024, L = 24, NQ = 8, NKV = 2, D = 256, HK = 16, HV = 16, DK = 128, DV = 128, I = 3584, VOCAB = 248320,
       G = 64, CONVK = 4 };
#define C_QKV (2 * HK * DK + HV * DV)

typedef struct { char name[192]; int q; long rows, cols; int nd; long shape[3]; } tdesc;
static tdesc T[1024];
static int nt;

static void mat(const char *name, long rows, long cols) { /* quantized linear */
    tdesc *t = &T[nt++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->q = 1; t->rows = rows; t->cols = cols;
}
static void vec(const char *name, int nd, long a, long b, long c) { /* bf16 vector/conv */
    tdesc *t = &T[nt++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->q = 0; t->nd = nd; t->shape[0] = a; t->shape[1] = b; t->shape[2] = c;
}

static void layer(const char *p, int full) {
    char n[160];
#define N(s) (snprintf(n, sizeof n, "%s%s", p, s), n)
    vec(N("input_layernorm.weight"), 1, H, 0, 0);
    vec(N("post_attention_layernorm.weight"), 1, H, 0, 0);
    if (full) {
        mat(N("self_attn.q_proj"), 2 * NQ * D, H);
        mat(N("self_attn.k_proj"), NKV * D, H);
        mat(N("self_attn.v_proj"), NKV * D, H);
        mat(N("self_attn.o_proj"), H, NQ * D);
        vec(N("self_attn.q_norm.weight"), 1, D, 0, 0);
        vec(N("self_attn.k_norm.weight"), 1, D, 0, 0);
    } else {
        mat(N("linear_attn.in_proj_qkv"), C_QKV, H);
        mat(N("linear_attn.in_proj_z"), HV * DV, H);
        mat(N("linear_attn.in_proj_b"), HV, H);
        mat(N("linear_attn.in_proj_a"), HV, H);
        mat(N("linear_attn.out_proj"), H, HV * DV);
        vec(N("linear_attn.conv1d.weight"), 3, C_QKV, 1, CONVK);
        vec(N("linear_attn.A_log"), 1, HV, 0, 0);
        vec(N("linear_attn.dt_bias"), 1, HV, 0, 0);
        vec(N("linear_attn.norm.weight"), 1, DV, 0, 0);
    }
    mat(N("mlp.gate_proj"), I, H);
    mat(N("mlp.up_proj"), I, H);
    mat(N("mlp.down_proj"), H, I);
#undef N
}

static uint64_t rs = 0x1234567;
static uint32_t rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (uint32_t)(rs >> 16); }
static uint16_t bf16(float f) { uint32_t u; memcpy(&u, &f, 4); return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16); }

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: synth08b OUTDIR\n"); return 2; }
    const char *out = argv[1];
    mkdir(out, 0755);
    mat("model.language_model.embed_tokens", VOCAB, H);
    vec("model.language_model.norm.weight", 1, H, 0, 0);
    for (int l = 0; l < L; l++) {
        char p[96];
        snprintf(p, sizeof p, "model.language_model.layers.%d.", l);
        layer(p, l % 4 == 3);
    }
    vec("mtp.pre_fc_norm_embedding.weight", 1, H, 0, 0);
    vec("mtp.pre_fc_norm_hidden.weight", 1, H, 0, 0);
    mat("mtp.fc", H, 2 * H);
    layer("mtp.layers.0.", 1);
    vec("mtp.norm.weight", 1, H, 0, 0);

    /* header */
    size_t cap = 1 << 20, len = 0, off = 0;
    char *hdr = malloc(cap);
    len += snprintf(hdr + len, cap - len, "{\"__metadata__\":{\"format\":\"mlx\"}");
    for (int i = 0; i < nt; i++) {
        tdesc *t = &T[i];
        if (t->q) {
            size_t wq = (size_t)t->rows * t->cols / 2 /* bytes of 4-bit values */, ss = (size_t)t->rows * (t->cols / G) * 2;
            len += snprintf(hdr + len, cap - len, ",\"%s.weight\":{\"dtype\":\"U32\",\"shape\":[%ld,%ld],\"data_offsets\":[%zu,%zu]}",
                            t->name, t->rows, t->cols / 8, off, off + wq);
            off += wq;
            len += snprintf(hdr + len, cap - len, ",\"%s.scales\":{\"dtype\":\"BF16\",\"shape\":[%ld,%ld],\"data_offsets\":[%zu,%zu]}",
                            t->name, t->rows, t->cols / G, off, off + ss);
            off += ss;
            len += snprintf(hdr + len, cap - len, ",\"%s.biases\":{\"dtype\":\"BF16\",\"shape\":[%ld,%ld],\"data_offsets\":[%zu,%zu]}",
                            t->name, t->rows, t->cols / G, off, off + ss);
            off += ss;
        } else {
            size_t n = (size_t)t->shape[0] * (t->nd > 1 ? t->shape[1] : 1) * (t->nd > 2 ? t->shape[2] : 1) * 2;
            if (t->nd == 1)
                len += snprintf(hdr + len, cap - len, ",\"%s\":{\"dtype\":\"BF16\",\"shape\":[%ld],\"data_offsets\":[%zu,%zu]}",
                                t->name, t->shape[0], off, off + n);
            else
                len += snprintf(hdr + len, cap - len, ",\"%s\":{\"dtype\":\"BF16\",\"shape\":[%ld,%ld,%ld],\"data_offsets\":[%zu,%zu]}",
                                t->name, t->shape[0], t->shape[1], t->shape[2], off, off + n);
            off += n;
        }
    }
    len += snprintf(hdr + len, cap - len, "}");
    while (len % 8) hdr[len++] = ' ';
    char path[1024];
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); return 1; }
    uint64_t hl = len;
    fwrite(&hl, 8, 1, f);
    fwrite(hdr, 1, len, f);
    /* data, in header order */
    static uint32_t buf[1 << 16];
    for (int i = 0; i < nt; i++) {
        tdesc *t = &T[i];
        if (t->q) {
            size_t words = (size_t)t->rows * t->cols / 8;
            for (size_t w = 0; w < words;) {
                size_t k = words - w < (1 << 16) ? words - w : (1 << 16);
                for (size_t j = 0; j < k; j++) buf[j] = rnd() ^ (rnd() << 16);
                fwrite(buf, 4, k, f);
                w += k;
            }
            /* w = scale * q + bias, q in 0..15: centred, std ~ 0.02 / sqrt(cols/1024) */
            size_t ng = (size_t)t->rows * (t->cols / G);
            float sc = 0.02f / 4.6f; /* uniform q in 0..15 has std 4.6: weights with std 0.02 */
            uint16_t *s = malloc(ng * 2), *b = malloc(ng * 2);
            for (size_t j = 0; j < ng; j++) { s[j] = bf16(sc); b[j] = bf16(-7.5f * sc); }
            fwrite(s, 2, ng, f);
            fwrite(b, 2, ng, f);
            free(s); free(b);
        } else {
            size_t n = (size_t)t->shape[0] * (t->nd > 1 ? t->shape[1] : 1) * (t->nd > 2 ? t->shape[2] : 1);
            int is_norm = strstr(t->name, "norm") != NULL, is_alog = strstr(t->name, "A_log") != NULL;
            int is_gnorm = strstr(t->name, "linear_attn.norm") != NULL;
            for (size_t j = 0; j < n; j++) {
                float v = is_gnorm ? 1.0f : is_norm ? 0.0f : is_alog ? 0.5f : ((float)(rnd() % 2001) - 1000.0f) * 2e-4f;
                uint16_t h = bf16(v);
                fwrite(&h, 2, 1, f);
            }
        }
    }
    fclose(f);
    snprintf(path, sizeof path, "%s/config.json", out);
    f = fopen(path, "w");
    fprintf(f, "{\"model_type\":\"qwen3_5\",\"tie_word_embeddings\":true,\"quantization\":{\"group_size\":%d,\"bits\":4},"
               "\"text_config\":{\"model_type\":\"qwen3_5_text\",\"hidden_size\":%d,\"num_hidden_layers\":%d,"
               "\"num_attention_heads\":%d,\"num_key_value_heads\":%d,\"head_dim\":%d,\"linear_num_key_heads\":%d,"
               "\"linear_num_value_heads\":%d,\"linear_key_head_dim\":%d,\"linear_value_head_dim\":%d,"
               "\"linear_conv_kernel_dim\":%d,\"intermediate_size\":%d,\"vocab_size\":%d,\"full_attention_interval\":4,"
               "\"rms_norm_eps\":1e-6,\"max_position_embeddings\":262144,\"mtp_num_hidden_layers\":1,"
               "\"tie_word_embeddings\":true,\"rope_parameters\":{\"rope_theta\":10000000.0,\"partial_rotary_factor\":0.25,"
               "\"rope_type\":\"default\",\"mrope_interleaved\":true,\"mrope_section\":[11,11,10]}}}\n",
            G, H, L, NQ, NKV, D, HK, HV, DK, DV, CONVK, I, VOCAB);
    fclose(f);
    printf("%s: %d tensors, %.1f MiB of data\n", out, nt, off / 1048576.0);
    return 0;
}
