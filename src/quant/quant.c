/* quant.c: per-group affine quantization in the MLX layout (see quant.h). */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant/quant.h"

float ts_quant_sget(ts_dtype t, const void *p, int64_t i) {
    switch (t) {
    case TS_DTYPE_F32: return ((const float *)p)[i];
    case TS_DTYPE_F16: return ts_f16_to_f32(((const uint16_t *)p)[i]);
    case TS_DTYPE_BF16: return ts_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return 0.f;
    }
}

void ts_quant_sset(ts_dtype t, void *p, int64_t i, float v) {
    switch (t) {
    case TS_DTYPE_F32: ((float *)p)[i] = v; break;
    case TS_DTYPE_F16: ((uint16_t *)p)[i] = ts_f32_to_f16(v); break;
    case TS_DTYPE_BF16: ((uint16_t *)p)[i] = ts_f32_to_bf16(v); break;
    default: break;
    }
}

void ts_quant_row(const float *w, int64_t cols, int bits, int group, ts_dtype sdtype, uint32_t *q, void *scales,
                  void *biases) {
    const int qmax = (1 << bits) - 1;
    memset(q, 0, sizeof(uint32_t) * (size_t)(cols * bits / 32));
    for (int64_t g = 0; g < cols / group; g++) {
        const float *wg = w + g * group;
        float mn = wg[0], mx = wg[0];
        for (int j = 1; j < group; j++) { mn = fminf(mn, wg[j]); mx = fmaxf(mx, wg[j]); }
        ts_quant_sset(sdtype, scales, g, (mx - mn) / (float)qmax);
        ts_quant_sset(sdtype, biases, g, mn);
        float s = ts_quant_sget(sdtype, scales, g), b = ts_quant_sget(sdtype, biases, g);
        float inv = s > 0.f ? 1.0f / s : 0.f;
        for (int j = 0; j < group; j++) {
            float v = s > 0.f ? nearbyintf((wg[j] - b) * inv) : 0.f;
            int qi = v < 0.f ? 0 : v > (float)qmax ? qmax : (int)v;
            int64_t c = g * group + j;
            q[c * bits / 32] |= (uint32_t)qi << ((c * bits) % 32);
        }
    }
}

void ts_dequant_row(const uint32_t *q, const void *scales, const void *biases, int64_t cols, int bits, int group,
                    ts_dtype sdtype, float *out) {
    const uint32_t mask = (1u << bits) - 1;
    for (int64_t c = 0; c < cols; c++) {
        uint32_t v = (q[c * bits / 32] >> ((c * bits) % 32)) & mask;
        out[c] = ts_quant_sget(sdtype, scales, c / group) * (float)v + ts_quant_sget(sdtype, biases, c / group);
    }
}

/* ---- install directories ---- */

int ts_install_begin(const char *dst, char *tmp, size_t cap, ts_error *err) {
    struct stat sb;
    if (!dst || !*dst) return ts_fail(err, TS_E_ARG, "no output directory given");
    if (stat(dst, &sb) == 0) return ts_fail(err, TS_E_ARG, "%s: already exists (refusing to overwrite)", dst);
    snprintf(tmp, cap, "%s.partial-%ld", dst, (long)getpid());
    ts_install_abort(tmp);
    if (mkdir(tmp, 0755) != 0) return ts_fail(err, TS_E_IO, "%s: cannot create directory: %s", tmp, strerror(errno));
    return 0;
}

int ts_install_commit(const char *tmp, const char *dst, ts_error *err) {
    if (rename(tmp, dst) != 0) {
        int e = errno;
        ts_install_abort(tmp);
        return ts_fail(err, TS_E_IO, "cannot rename %s to %s: %s", tmp, dst, strerror(e));
    }
    return 0;
}

void ts_install_abort(const char *tmp) {
    DIR *d = opendir(tmp);
    if (!d) return;
    struct dirent *de;
    char p[4096];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        unlink(ts_path_join(p, sizeof p, tmp, de->d_name));
    }
    closedir(d);
    rmdir(tmp);
}

void ts_install_progress(const char *label, size_t done, size_t total) {
    int w = 30, f = total ? (int)((double)done / (double)total * w) : w;
    char bar[64];
    for (int i = 0; i < w; i++) bar[i] = i < f ? '#' : ' ';
    bar[w] = 0;
    fprintf(stderr, "\r%s [%s] %3d%%  %.0f / %.0f MB", label, bar, total ? (int)(100.0 * done / total) : 100,
            done / 1e6, total / 1e6);
    if (done >= total) fputc('\n', stderr);
    fflush(stderr);
}
