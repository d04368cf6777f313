/* wy_emu.c (session 20, branch gdn-wy): a CPU emulation of gdn.cu's k_gdnw_prep + k_gdnw_scan (the same loops and layouts, serial) against the plain recurrence in double, to check the WY algebra and indexing without a GPU: gcc -O2 wy_emu.c -lm; ./a.out ROWS HK HV SEGMENT_ROWS (0: one segment). Session 20: 3e-7..7.5e-7 relative on 37..300 rows, segments of 64/128 rows. Session 21: the loops of the register-tiled scan and the substitution with its right sides first. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define DK 128
#define DV 128
#define WL 64
#define WJ 32
#define WP (DK + 4)
#define AP (WL + 4)
enum { R_U = 0, R_W = WL * DV, R_M = R_W + WL * DK, R_EQ = R_M + WL * WL, R_EK = R_EQ + WL, R_EL = R_EK + WL, REC = R_EL + WL };
static float fr(void) { return (float)rand() / RAND_MAX * 2.f - 1.f; }
static float sigm(float x) { return 1.f / (1.f + expf(-x)); }
static float softp(float x) { return x > 20.f ? x : log1pf(expf(x)); }
int n, Hk, Hv, Kd, C;
float *prep, *bb, *aa, *nA, *dtb, *wy;
static void prep_k(int r0, int nr, int ch, int h) {
    static float Ks[WL * WP], Qs[WL * WP], As[WL * AP], bs[WL], lgs[WL], eqs[WL];
    static double Gd[WL];
    const int g = h / (Hv / Hk), t0 = ch * WL, Lc = nr - t0 < WL ? nr - t0 : WL;
    float *rec = wy + ((long)ch * Hv + h) * REC;
    for (int t = 0; t < WL; t++) for (int d = 0; d < DK; d++) {
        float q = 0, k = 0;
        if (t < Lc) { const float *row = prep + (long)(r0 + t0 + t) * C; q = row[g * DK + d], k = row[Kd + g * DK + d]; }
        Qs[t * WP + d] = q, Ks[t * WP + d] = k;
    }
    for (int tid = 0; tid < WL; tid++) {
        float beta = 0, lg = 0;
        if (tid < Lc) { long i = (long)(r0 + t0 + tid) * Hv + h; beta = sigm(bb[i]); lg = nA[h] * softp(aa[i] + dtb[h]); }
        bs[tid] = beta, lgs[tid] = lg;
    }
    double acc = 0; for (int t = 0; t < WL; t++) acc += t < Lc ? (double)lgs[t] : 0.0, Gd[t] = acc;
    /* session 21's A/M: a thread a 4 x 4 tile, t = tb + 16 r, s = sb + 16 c, sums over i in float4 order */
    for (int tid = 0; tid < 256; tid++) {
        int tb = tid >> 4, sb = tid & 15;
        for (int r = 0; r < 4; r++) for (int c = 0; c < 4; c++) {
            int t = tb + 16 * r, sx = sb + 16 * c; float kk = 0, qk = 0;
            for (int i = 0; i < DK; i++) kk = fmaf(Ks[t * WP + i], Ks[sx * WP + i], kk), qk = fmaf(Qs[t * WP + i], Ks[sx * WP + i], qk);
            float av = 0, mv = 0;
            if (sx <= t && t < Lc) { float ed = (float)exp(Gd[t] - Gd[sx]); if (sx < t) av = bs[t] * ed * kk; mv = ed * qk; }
            As[t * AP + sx] = av; rec[R_M + t * WL + sx] = mv;
        }
    }
    for (int tid = 0; tid < WL; tid++) {
        float eq = tid < Lc ? (float)exp(Gd[tid]) : 0.f; eqs[tid] = eq; rec[R_EQ + tid] = eq;
        rec[R_EK + tid] = tid < Lc ? (float)exp(Gd[Lc - 1] - Gd[tid]) : 0.f;
        if (tid == 0) rec[R_EL] = (float)exp(Gd[Lc - 1]);
    }
    for (int col = 0; col < DV + DK; col++) { /* session 21's form: the column in registers, all 64 rows (A is 0 past Lc) */
        float x[WL];
        for (int t = 0; t < WL; t++) x[t] = t >= Lc ? 0.f : col < DV ? bs[t] * prep[(long)(r0 + t0 + t) * C + 2 * Kd + h * DV + col] : bs[t] * eqs[t] * Ks[t * WP + col - DV];
        for (int t = 1; t < WL; t++) {
            const float *at = As + t * AP;
            float p0 = 0, p1 = 0, p2 = 0, p3 = 0; int sx = 0;
            for (; sx + 4 <= t; sx += 4) p0 = fmaf(at[sx], x[sx], p0), p1 = fmaf(at[sx + 1], x[sx + 1], p1), p2 = fmaf(at[sx + 2], x[sx + 2], p2), p3 = fmaf(at[sx + 3], x[sx + 3], p3);
            for (; sx < t; sx++) p0 = fmaf(at[sx], x[sx], p0);
            x[t] -= (p0 + p1) + (p2 + p3);
        }
        for (int t = 0; t < WL; t++) rec[col < DV ? R_U + t * DV + col : R_W + t * DK + col - DV] = x[t];
    }
}
#define MP (WL + 4)
/* session 21's k_gdnw_scan: register tiles, the 256 threads in a serial loop per phase (its barriers) */
static void scan_k(int r0, int nr, int blk, float *S, float *o) {
    static float Ss[DK * WJ], Ws[WL * WP], Qt[WL * WP], Kt[WL * WP], Ms[WL * MP], Ds[WL * WJ], eqs[WL], eks[WL];
    const int Vd = Hv * DV, h = blk / (DV / WJ), j0 = (blk % (DV / WJ)) * WJ, g = h / (Hv / Hk);
    float *Sh = S + (long)h * DK * DV;
    for (int e = 0; e < DK * WJ; e++) Ss[e] = Sh[(e / WJ) * DV + j0 + e % WJ];
    int nch = (nr + WL - 1) / WL;
    for (int ch = 0; ch < nch; ch++) {
        const float *rec = wy + ((long)ch * Hv + h) * REC;
        int t0 = ch * WL, Lc = nr - t0 < WL ? nr - t0 : WL;
        for (int t = 0; t < WL; t++) eqs[t] = rec[R_EQ + t], eks[t] = rec[R_EK + t];
        float eL = rec[R_EL];
        for (int e = 0; e < WL * WL; e++) Ms[(e / WL) * MP + e % WL] = rec[R_M + e];
        for (int e = 0; e < WL * WJ; e++) Ds[e] = rec[R_U + (e / WJ) * DV + j0 + e % WJ];
        for (int t = 0; t < WL; t++) for (int d = 0; d < DK; d++) {
            float w = rec[R_W + t * DK + d], q = 0, k = 0;
            if (t < Lc) { const float *row = prep + (long)(r0 + t0 + t) * C; q = row[g * DK + d] * eqs[t]; k = row[Kd + g * DK + d] * eks[t]; }
            Ws[t * WP + d] = w, Qt[t * WP + d] = q, Kt[t * WP + d] = k;
        }
        static float acc[256][4][2];
        for (int tid = 0; tid < 256; tid++) {
            int tc = tid & 15, tr = tid >> 4, jc = 2 * tc;
            for (int r = 0; r < 4; r++) { acc[tid][r][0] = acc[tid][r][1] = 0; }
            for (int i = 0; i < DK; i += 4) for (int r = 0; r < 4; r++) for (int c = 0; c < 4; c++) for (int cc = 0; cc < 2; cc++)
                acc[tid][r][cc] = fmaf(Ws[(4 * tr + r) * WP + i + c], Ss[(i + c) * WJ + jc + cc], acc[tid][r][cc]);
        }
        for (int tid = 0; tid < 256; tid++) {
            int tc = tid & 15, tr = tid >> 4, jc = 2 * tc;
            for (int r = 0; r < 4; r++) for (int cc = 0; cc < 2; cc++) Ds[(4 * tr + r) * WJ + jc + cc] -= acc[tid][r][cc];
        }
        for (int tid = 0; tid < 256; tid++) {
            int tc = tid & 15, tr = tid >> 4, jc = 2 * tc;
            float a2[4][2] = {{0}};
            for (int i = 0; i < DK; i += 4) for (int r = 0; r < 4; r++) for (int c = 0; c < 4; c++) for (int cc = 0; cc < 2; cc++)
                a2[r][cc] = fmaf(Qt[(4 * tr + r) * WP + i + c], Ss[(i + c) * WJ + jc + cc], a2[r][cc]);
            for (int sx = 0; sx < 4 * tr + 4; sx += 4) for (int r = 0; r < 4; r++) for (int c = 0; c < 4; c++) for (int cc = 0; cc < 2; cc++)
                a2[r][cc] = fmaf(Ms[(4 * tr + r) * MP + sx + c], Ds[(sx + c) * WJ + jc + cc], a2[r][cc]);
            for (int r = 0; r < 4; r++) { int t = 4 * tr + r; if (t < Lc) for (int cc = 0; cc < 2; cc++) o[(long)(r0 + t0 + t) * Vd + h * DV + j0 + jc + cc] = a2[r][cc]; }
        }
        for (int tid = 0; tid < 256; tid++) {
            int tc = tid & 15, tr = tid >> 4, jc = 2 * tc;
            float sa[8][2];
            for (int r = 0; r < 8; r++) for (int cc = 0; cc < 2; cc++) sa[r][cc] = eL * Ss[(8 * tr + r) * WJ + jc + cc];
            for (int sx = 0; sx < Lc; sx++) for (int r = 0; r < 8; r++) for (int cc = 0; cc < 2; cc++)
                sa[r][cc] = fmaf(Kt[sx * WP + 8 * tr + r], Ds[sx * WJ + jc + cc], sa[r][cc]);
            for (int r = 0; r < 8; r++) for (int cc = 0; cc < 2; cc++) Ss[(8 * tr + r) * WJ + jc + cc] = sa[r][cc];
        }
    }
    for (int e = 0; e < DK * WJ; e++) Sh[(e / WJ) * DV + j0 + e % WJ] = Ss[e];
}
int main(int argc, char **argv) {
    n = atoi(argv[1]); Hk = atoi(argv[2]); Hv = atoi(argv[3]); int seg = atoi(argv[4]);
    Kd = Hk * DK; C = 2 * Kd + Hv * DV; int Vd = Hv * DV;
    prep = malloc(sizeof(float) * n * C); bb = malloc(sizeof(float) * n * Hv); aa = malloc(sizeof(float) * n * Hv);
    nA = malloc(sizeof(float) * Hv); dtb = malloc(sizeof(float) * Hv);
    for (long i = 0; i < (long)n * C; i++) prep[i] = fr();
    /* q, k l2-normed per head (q also / sqrt(dk)) as k_gdnp_l2 leaves them */
    for (int t = 0; t < n; t++) for (int hd = 0; hd < 2 * Hk; hd++) {
        float *p = prep + (long)t * C + hd * DK; double ss = 0; for (int i = 0; i < DK; i++) ss += p[i] * p[i];
        float r = 1.f / sqrtf((float)ss + 1e-6f); for (int i = 0; i < DK; i++) p[i] *= r * (hd < Hk ? 1.f / sqrtf(DK) : 1.f);
    }
    for (long i = 0; i < (long)n * Hv; i++) bb[i] = 2 * fr(), aa[i] = 2 * fr();
    for (int h = 0; h < Hv; h++) nA[h] = -expf(fr()), dtb[h] = fr();
    long nS = (long)Hv * DK * DV;
    float *S0 = malloc(sizeof(float) * nS), *S1 = malloc(sizeof(float) * nS), *S2 = malloc(sizeof(float) * nS);
    for (long i = 0; i < nS; i++) S0[i] = 0.05f * fr();
    memcpy(S1, S0, sizeof(float) * nS); memcpy(S2, S0, sizeof(float) * nS);
    float *o1 = calloc((size_t)n * Vd, sizeof(float)), *o2 = calloc((size_t)n * Vd, sizeof(float));
    /* the plain recurrence (double) */
    for (int h = 0; h < Hv; h++) {
        int g = h / (Hv / Hk); float *Sh = S1 + (long)h * DK * DV;
        for (int t = 0; t < n; t++) {
            const float *row = prep + (long)t * C; const float *q = row + g * DK, *k = row + Kd + g * DK, *v = row + 2 * Kd + h * DV;
            float beta = sigm(bb[(long)t * Hv + h]); double dec = exp((double)nA[h] * softp(aa[(long)t * Hv + h] + dtb[h]));
            for (int j = 0; j < DV; j++) {
                double p = 0; for (int i = 0; i < DK; i++) { Sh[i * DV + j] *= dec; p += Sh[i * DV + j] * k[i]; }
                double d = beta * (v[j] - p), oo = 0;
                for (int i = 0; i < DK; i++) { Sh[i * DV + j] += k[i] * d; oo += Sh[i * DV + j] * q[i]; }
                o1[(long)t * Vd + h * DV + j] = (float)oo;
            }
        }
    }
    int segr = seg > 0 ? seg : (n + 63) / 64 * 64;
    wy = malloc(sizeof(float) * ((segr + WL - 1) / WL) * Hv * REC);
    for (int r0 = 0; r0 < n; r0 += segr) {
        int nr = n - r0 < segr ? n - r0 : segr;
        for (int ch = 0; ch < (nr + WL - 1) / WL; ch++) for (int h = 0; h < Hv; h++) prep_k(r0, nr, ch, h);
        for (int blk = 0; blk < Hv * (DV / WJ); blk++) scan_k(r0, nr, blk, S2, o2);
    }
    double mo = 0, maxo = 0, ms = 0, maxs = 0;
    for (long i = 0; i < (long)n * Vd; i++) mo = fmax(mo, fabs(o1[i] - o2[i])), maxo = fmax(maxo, fabs(o1[i]));
    for (long i = 0; i < nS; i++) ms = fmax(ms, fabs(S1[i] - S2[i])), maxs = fmax(maxs, fabs(S1[i]));
    printf("n %d Hk %d Hv %d seg %d: max|o| %.3g err %.3g (%.2g rel), max|S| %.3g err %.3g (%.2g rel)\n", n, Hk, Hv, segr, maxo, mo, mo / maxo, maxs, ms, ms / maxs);
    return 0;
}
