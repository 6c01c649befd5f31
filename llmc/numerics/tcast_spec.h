/*
 * tcast_spec.h - the TensorCast data type grammar (doc/TCAST.md sections 1-3): parsing of number
 * codes (tcast_parse_number: eXmY[bZ][fn|fnuz], intK, uintK, aliases), scale codes
 * (tcast_parse_scale: SCALE[_ZERO][_tX[dY]]; tcast_parse_fixed_scale: the fixed scale pN) and data
 * types (tcast_parse_datatype: a predefined name or NUMBER[_SCALE], then @ modifiers), with every
 * rule of sections 1-3 checked; the parsers
 * also precompute the integers the device path needs (max and midmax as mantissa integers,
 * signed-zero rule). And the way back: canonical codes (tcast_number_code, tcast_scale_code,
 * tcast_datatype_describe), the predefined table (tcast_predefined) and mode names.
 *
 * Host only (snprintf, ldexp); plain C, usable from C, C++ and CUDA host code. The specs it fills
 * are those of llmc/numerics/tcast_quant.h.
 */
#ifndef LLMC_NUMERICS_TCAST_SPEC_H
#define LLMC_NUMERICS_TCAST_SPEC_H

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "llmc/numerics/tcast_quant.h"  // the specs, TCAST_BIAS_MAX, TCAST_SPARSE_N_MAX

// ----------------------------------------------------------------------------------------------
// Parsing (host only). Every parser returns 0, or -1 with a message in err (n bytes; err may be
// NULL) that names the offending code and what is wrong.

#if defined(__GNUC__) || defined(__clang__)
#define TCAST_PRINTF_(a, b) __attribute__((format(printf, a, b)))
#else
#define TCAST_PRINTF_(a, b)
#endif

static inline TCAST_PRINTF_(3, 4) int tcast_fail_(char* err, size_t n, const char* fmt, ...) {
    if (err != NULL && n > 0) {
        va_list args;
        va_start(args, fmt);
        vsnprintf(err, n, fmt, args);
        va_end(args);
    }
    return -1;
}

// Case-insensitive prefix test.
static inline int tcast_prefix_(const char* s, const char* prefix) {
    for (; *prefix; s++, prefix++)
        if (tolower((unsigned char)*s) != *prefix) return 0;
    return 1;
}

// Case-insensitive equality.
static inline int tcast_ieq_(const char* a, const char* b) {
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
    return *a == *b;
}

// Removes one leading "torch." and then one leading "float8_" (section 1.1, case-insensitive).
static inline const char* tcast_strip_prefixes_(const char* s) {
    if (tcast_prefix_(s, "torch.")) s += 6;
    if (tcast_prefix_(s, "float8_")) s += 7;
    return s;
}

// Reads 1..5 decimal digits at *p (advancing it) into *v; 0 if there are none or too many.
static inline int tcast_digits_(const char** p, int* v) {
    int k = 0, x = 0;
    while (isdigit((unsigned char)(*p)[k])) {
        if (++k > 5) return 0;
        x = x * 10 + ((*p)[k - 1] - '0');
    }
    *p += k;
    *v = x;
    return k > 0;
}

// Fills the derived fields of a float (or int fixed-point view) spec (section 1.2).
static inline void tcast_derive_float_(TcastNumberSpec* s) {
    s->emax = (1 << s->ebits) - 1 - s->bias - (s->infnan == TCAST_INFNAN_IEEE ? 1 : 0);
    s->emin = 1 - s->bias;
    s->max_mant = (2u << s->mbits) - (s->infnan == TCAST_INFNAN_FN ? 2u : 1u);
    s->midmax_mant = s->max_mant + (2u << s->mbits);
    s->max = ldexp((double)s->max_mant, s->emax - s->mbits);
    s->midmax = ldexp((double)s->midmax_mant, s->emax - s->mbits - 1);
    s->smallest_normal = ldexp(1.0, s->emin);
    s->eps = ldexp(1.0, -s->mbits);
    s->signed_zero = s->infnan != TCAST_INFNAN_FNUZ;
}

// Parses a number code after prefix removal (`c`, lower or mixed case); `code` is the text as
// given, for messages. Aliases of section 1.1 are resolved here.
static inline int tcast_parse_number_stripped_(const char* code, const char* c, TcastNumberSpec* spec, char* err, size_t n) {
    static const char* const aliases[][2] = {{"float32", "e8m23"},       {"bfloat16", "e8m7"},
                                             {"float16", "e5m10"},       {"e4m3fnuz", "e4m3b8fnuz"},
                                             {"e5m2fnuz", "e5m2b16fnuz"}};
    TcastNumberSpec s;
    memset(&s, 0, sizeof(s));
    for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
        if (tcast_ieq_(c, aliases[i][0])) c = aliases[i][1];
    const char* p = c;
    int v;
    if (tcast_prefix_(p, "uint") || tcast_prefix_(p, "int")) {
        int is_uint = tcast_prefix_(p, "uint");
        p += is_uint ? 4 : 3;
        if (!tcast_digits_(&p, &v) || *p != '\0')
            return tcast_fail_(err, n, "number code '%s': expected %sK with a width K", code, is_uint ? "uint" : "int");
        if (v < 2 || v > 16) return tcast_fail_(err, n, "number code '%s': width K=%d outside 2..16", code, v);
        s.bits = v;
        if (is_uint) {
            s.kind = TCAST_KIND_UINT;
            s.infnan = TCAST_INFNAN_NONE;
            s.maxint = (1 << v) - 1;
            s.minint = 0;
        } else {
            // the fixed-point view e1m(K-2)b1fnuz of section 1.2
            s.kind = TCAST_KIND_INT;
            s.ebits = 1;
            s.mbits = v - 2;
            s.bias = 1;
            s.infnan = TCAST_INFNAN_FNUZ;
            tcast_derive_float_(&s);
            s.maxint = (1 << (v - 1)) - 1;
            s.minint = -s.maxint;
        }
        *spec = s;
        return 0;
    }
    int x, y, z = -1;
    if (tolower((unsigned char)*p) != 'e') return tcast_fail_(err, n, "number code '%s': unknown code (expected eXmY[bZ][fn|fnuz], intK, uintK or an alias)", code);
    p++;
    if (!tcast_digits_(&p, &x) || tolower((unsigned char)*p) != 'm')
        return tcast_fail_(err, n, "number code '%s': expected eXmY[bZ][fn|fnuz]", code);
    p++;
    if (!tcast_digits_(&p, &y)) return tcast_fail_(err, n, "number code '%s': expected eXmY[bZ][fn|fnuz]", code);
    if (tolower((unsigned char)*p) == 'b') {
        p++;
        if (!tcast_digits_(&p, &z)) return tcast_fail_(err, n, "number code '%s': bZ needs a non-negative bias Z", code);
    }
    TcastInfNan mode = TCAST_INFNAN_IEEE;
    if (tcast_ieq_(p, "fn")) mode = TCAST_INFNAN_FN;
    else if (tcast_ieq_(p, "fnuz")) mode = TCAST_INFNAN_FNUZ;
    else if (*p != '\0') return tcast_fail_(err, n, "number code '%s': unexpected '%s' (suffixes: fn, fnuz)", code, p);
    if (x < 1 || x > 8) return tcast_fail_(err, n, "number code '%s': exponent bits X=%d outside 1..8", code, x);
    if (y > 23) return tcast_fail_(err, n, "number code '%s': mantissa bits Y=%d outside 0..23", code, y);
    // Reading: the doc sets no bound on Z; TCAST_BIAS_MAX keeps every derived value exact in a double
    if (z > TCAST_BIAS_MAX) return tcast_fail_(err, n, "number code '%s': bias Z=%d outside 0..%d", code, z, TCAST_BIAS_MAX);
    s.ebits = x;
    s.mbits = y;
    s.bias = z >= 0 ? z : (1 << (x - 1)) - 1;
    s.infnan = mode;
    if (y == 0 && mode == TCAST_INFNAN_IEEE) {
        if (x < 4) return tcast_fail_(err, n, "number code '%s': exponent type eXm0 needs X in 4..8, got X=%d", code, x);
        s.kind = TCAST_KIND_EXPONENT;
        s.bits = x;
        s.emin = -s.bias;
        s.emax = (1 << x) - 2 - s.bias;
        s.max = ldexp(1.0, s.emax);
        s.smallest_normal = ldexp(1.0, s.emin);
        s.eps = 1.0;
        s.midmax = s.max;
        *spec = s;
        return 0;
    }
    if (y == 0 && mode == TCAST_INFNAN_FN)
        return tcast_fail_(err, n, "number code '%s': fn with Y=0 (its only top-binade code would be NaN)", code);
    s.kind = TCAST_KIND_FLOAT;
    s.bits = 1 + x + y;
    tcast_derive_float_(&s);
    if (s.emax < s.emin)
        return tcast_fail_(err, n, "number code '%s': emax %d < emin %d (no normal binade)", code, s.emax, s.emin);
    *spec = s;
    return 0;
}

// Section 1.1: parses a number code (case-insensitive; one leading "torch." then one leading
// "float8_" removed; aliases float32, bfloat16, float16, e4m3fnuz = e4m3b8fnuz, e5m2fnuz =
// e5m2b16fnuz). Biases are limited to 0..TCAST_BIAS_MAX.
static inline int tcast_parse_number(const char* code, TcastNumberSpec* spec, char* err, size_t n) {
    if (code == NULL) return tcast_fail_(err, n, "number code: missing");
    return tcast_parse_number_stripped_(code, tcast_strip_prefixes_(code), spec, err, n);
}

// Canonical code of a number spec: float e{X}m{Y}b{Z} + "" / "fn" / "fnuz"; int{K}; uint{K};
// exponent e{X}m0b{Z}. Returns buf.
static inline const char* tcast_number_code(const TcastNumberSpec* s, char* buf, size_t n) {
    static const char* const suffix[] = {"", "fn", "fnuz", ""};
    switch (s->kind) {
    case TCAST_KIND_INT: snprintf(buf, n, "int%d", s->bits); break;
    case TCAST_KIND_UINT: snprintf(buf, n, "uint%d", s->bits); break;
    case TCAST_KIND_EXPONENT: snprintf(buf, n, "e%dm0b%d", s->ebits, s->bias); break;
    default: snprintf(buf, n, "e%dm%db%d%s", s->ebits, s->mbits, s->bias, suffix[s->infnan]); break;
    }
    return buf;
}

// 1 if the token is a tile token tX[dY] (starts with 't', and is not a "torch." number code).
static inline int tcast_is_tile_token_(const char* t) {
    return tolower((unsigned char)t[0]) == 't' && !tcast_prefix_(t, "torch.");
}

// Section 2: parses a scale code SCALE[_ZERO][_tX[dY]]. Checks the grammar, the tile (0 or a power
// of two in 2..1024), the dimension (-2..1: the tensors here are 2-D) and the kinds that can
// appear at all (scale: exponent type or float; zero point: float or int, only with a float
// scale); which scales go with which data is tcast_parse_datatype's check.
static inline int tcast_parse_scale(const char* code, TcastScaleSpec* spec, char* err, size_t n) {
    char buf[128], sub[160];
    if (code == NULL) return tcast_fail_(err, n, "scale code: missing");
    if (strlen(code) >= sizeof(buf)) return tcast_fail_(err, n, "scale code '%.40s...': too long", code);
    strcpy(buf, code);
    const char* tok[4];
    int ntok = 0;
    for (char* p = buf;; p++) {
        char* end = strchr(p, '_');
        if (ntok == 4) return tcast_fail_(err, n, "scale code '%s': too many '_' tokens (expected SCALE[_ZERO][_tX[dY]])", code);
        tok[ntok++] = p;
        if (end == NULL) break;
        *end = '\0';
        p = end;
    }
    TcastScaleSpec s;
    memset(&s, 0, sizeof(s));
    s.tile = -1;
    s.dim = -1;
    for (int i = 0; i < ntok; i++)
        if (tok[i][0] == '\0') return tcast_fail_(err, n, "scale code '%s': empty token", code);
    if (tcast_is_tile_token_(tok[0])) return tcast_fail_(err, n, "scale code '%s': the scale number code is missing", code);
    if (tcast_parse_number(tok[0], &s.scale, sub, sizeof(sub)) != 0) return tcast_fail_(err, n, "scale code '%s': %s", code, sub);
    int i = 1;
    if (i < ntok && !tcast_is_tile_token_(tok[i])) {
        if (tcast_parse_number(tok[i], &s.zero, sub, sizeof(sub)) != 0) return tcast_fail_(err, n, "scale code '%s': %s", code, sub);
        s.has_zero = 1;
        i++;
    }
    if (i < ntok && tcast_is_tile_token_(tok[i])) {
        const char* p = tok[i] + 1;
        int x, y, neg = 0;
        if (!tcast_digits_(&p, &x)) return tcast_fail_(err, n, "scale code '%s': tile token '%s' is not tX[dY]", code, tok[i]);
        if (tolower((unsigned char)*p) == 'd') {
            p++;
            if (*p == '-') {
                neg = 1;
                p++;
            }
            if (!tcast_digits_(&p, &y)) return tcast_fail_(err, n, "scale code '%s': tile token '%s' is not tX[dY]", code, tok[i]);
            s.dim = neg ? -y : y;
            s.dim_given = 1;
        }
        if (*p != '\0') return tcast_fail_(err, n, "scale code '%s': tile token '%s' is not tX[dY]", code, tok[i]);
        if (x != 0 && (x < 2 || x > 1024 || (x & (x - 1)) != 0))
            return tcast_fail_(err, n, "scale code '%s': tile %d is not a power of two in 2..1024 (or t0)", code, x);
        if (s.dim < -2 || s.dim > 1)
            return tcast_fail_(err, n, "scale code '%s': dimension %d outside -2..1 (tensors are 2-D)", code, s.dim);
        s.tile = x;
        i++;
    }
    if (i < ntok) return tcast_fail_(err, n, "scale code '%s': unexpected token '%s' (expected SCALE[_ZERO][_tX[dY]])", code, tok[i]);
    if (s.scale.kind != TCAST_KIND_EXPONENT && s.scale.kind != TCAST_KIND_FLOAT)
        return tcast_fail_(err, n, "scale code '%s': scale '%s' must be an exponent type (eXm0) or a float", code, tok[0]);
    if (s.has_zero && s.zero.kind != TCAST_KIND_FLOAT && s.zero.kind != TCAST_KIND_INT)
        return tcast_fail_(err, n, "scale code '%s': zero point '%s' must be a float or an intK", code, tok[1]);
    if (s.has_zero && s.scale.kind != TCAST_KIND_FLOAT)
        return tcast_fail_(err, n, "scale code '%s': a zero point needs a float scale, not '%s'", code, tok[0]);
    *spec = s;
    return 0;
}

// 1 if a scale code is a fixed scale: it starts with 'p' (any case), which no number code does.
static inline int tcast_is_fixed_scale_(const char* code) {
    return tolower((unsigned char)code[0]) == 'p';
}

// Section 2: parses the fixed scale code pN (N a decimal integer with an optional sign, in
// TCAST_FIXED_MIN..TCAST_FIXED_MAX) into *exp. pN is the whole scale code: one scale for the whole
// tensor by definition, so a tile token after it is an error, and so is any other token (a fixed
// scale has no zero point).
static inline int tcast_parse_fixed_scale(const char* code, int* exp, char* err, size_t n) {
    if (code == NULL || !tcast_is_fixed_scale_(code)) return tcast_fail_(err, n, "scale code '%s': not a fixed scale pN", code ? code : "");
    const char* us = strchr(code, '_');
    if (us != NULL && tcast_is_tile_token_(us + 1))
        return tcast_fail_(err, n, "scale code '%s': a fixed scale pN is one scale for the whole tensor, it takes no tile token ('%s')",
                           code, us + 1);
    if (us != NULL)
        return tcast_fail_(err, n, "scale code '%s': a fixed scale pN is the whole scale code (no zero point), unexpected '%s'", code,
                           us + 1);
    const char* p = code + 1;
    int neg = 0, v;
    if (*p == '-' || *p == '+') neg = *p++ == '-';
    if (!tcast_digits_(&p, &v) || *p != '\0')
        return tcast_fail_(err, n, "scale code '%s': expected a fixed scale pN, N a decimal integer (e.g. p-1)", code);
    v = neg ? -v : v;
    if (v < TCAST_FIXED_MIN || v > TCAST_FIXED_MAX)
        return tcast_fail_(err, n, "scale code '%s': fixed scale exponent N=%d outside %d..%d (the range of an E8M0 scale)", code, v,
                           TCAST_FIXED_MIN, TCAST_FIXED_MAX);
    *exp = v;
    return 0;
}

// Canonical scale code SCALE[_ZERO][_tX[dY]] (dY only when it was given). Returns buf.
static inline const char* tcast_scale_code(const TcastScaleSpec* s, char* buf, size_t n) {
    char a[32], z[32] = "", t[32] = "";
    tcast_number_code(&s->scale, a, sizeof(a));
    if (s->has_zero) {
        z[0] = '_';
        tcast_number_code(&s->zero, z + 1, sizeof(z) - 1);
    }
    if (s->tile >= 0) {
        if (s->dim_given) snprintf(t, sizeof(t), "_t%dd%d", s->tile, s->dim);
        else snprintf(t, sizeof(t), "_t%d", s->tile);
    }
    snprintf(buf, n, "%s%s%s", a, z, t);
    return buf;
}

// The predefined data types of section 3: entry i (0 <= i < count) as name, number code and scale
// code (NULL for unscaled). Returns the number of entries when i is out of range, else 0.
static inline int tcast_predefined(int i, const char** name, const char** number, const char** scale) {
    static const char* const table[][3] = {
        {"float32", "float32", NULL},      {"bfloat16", "bfloat16", NULL},    {"float16", "float16", NULL},
        {"e5m2", "e5m2", NULL},            {"e4m3fn", "e4m3fn", NULL},        {"e5m2fnuz", "e5m2fnuz", NULL},
        {"e4m3fnuz", "e4m3fnuz", NULL},    {"e3m2fnuz", "e3m2fnuz", NULL},    {"e2m3fnuz", "e2m3fnuz", NULL},
        {"e2m1fnuz", "e2m1fnuz", NULL},
        {"uint16_ff", "uint16", "float16_float16"},     {"uint16_bb", "uint16", "bfloat16_bfloat16"},
        {"int16_f", "int16", "float16"},   {"int16_b", "int16", "bfloat16"},  {"int16_e", "int16", "e8m0"},
        {"q115", "int16", "p-1"},  // the SF16 build's Q1.15 (llmc/numerics/q115.h): int16 elements times 2^-1
        {"uint8_ff", "uint8", "float16_float16"},       {"uint8_bb", "uint8", "bfloat16_bfloat16"},
        {"uint8_fi", "uint8", "float16_int8"},          {"uint8_bi", "uint8", "bfloat16_int8"},
        {"int8_f", "int8", "float16"},     {"int8_b", "int8", "bfloat16"},    {"int8_e", "int8", "e8m0"},
        {"e5m2_e", "e5m2", "e8m0"},        {"e5m2z_e", "e5m2fnuz", "e8m0"},   {"e4m3_e", "e4m3fn", "e8m0"},
        {"e4m3z_e", "e4m3fnuz", "e8m0"},   {"e3m2_e", "e3m2fnuz", "e8m0"},    {"e2m3_e", "e2m3fnuz", "e8m0"},
        {"mxfp8e5", "e5m2", "e8m0_t32"},   {"mxfp8e4", "e4m3fn", "e8m0_t32"}, {"mxfp6e3", "e3m2fnuz", "e8m0_t32"},
        {"mxfp6e2", "e2m3fnuz", "e8m0_t32"},            {"mxfp4e2", "e2m1fnuz", "e8m0_t32"},
        {"mxint8", "int8", "e8m0_t32"},    {"mxint4", "int4", "e8m0_t32"},    {"bfp16", "int8", "e8m0_t8"},
        {"uint8_ff32", "uint8", "float16_float16_t32"}, {"uint8_bb32", "uint8", "bfloat16_bfloat16_t32"},
        {"uint8_fi32", "uint8", "float16_int8_t32"},    {"uint8_bi32", "uint8", "bfloat16_int8_t32"},
        {"uint4_ff32", "uint4", "float16_float16_t32"}, {"uint4_bb32", "uint4", "bfloat16_bfloat16_t32"},
        {"uint4_fi32", "uint4", "float16_int8_t32"},    {"uint4_bi32", "uint4", "bfloat16_int8_t32"},
        {"int8_f32", "int8", "float16_t32"},            {"int8_b32", "int8", "bfloat16_t32"},
        {"int4_f32", "int4", "float16_t32"},            {"int4_b32", "int4", "bfloat16_t32"},
    };
    const int count = (int)(sizeof(table) / sizeof(table[0]));
    if (i < 0 || i >= count) return count;
    *name = table[i][0];
    *number = table[i][1];
    *scale = table[i][2];
    return 0;
}

// Section 2's table: which scales go with which data. text names the data type in messages.
static inline int tcast_check_kinds_(const char* text, const TcastDataType* dt, char* err, size_t n) {
    char a[32], b[32], c[32];
    const TcastNumberSpec* f = &dt->number;
    tcast_number_code(f, a, sizeof(a));
    if (f->kind == TCAST_KIND_EXPONENT)
        return tcast_fail_(err, n, "data type '%s': the exponent type %s is only a scale, not a data type", text, a);
    if (dt->fixed) {
        // Reading: a fixed scale is trivial for float and int data (their grids times 2^N); uint data
        // would need a zero point, which pN does not have
        if (f->kind == TCAST_KIND_UINT)
            return tcast_fail_(err, n, "data type '%s': uint data %s takes a float scale and a zero point, not the fixed scale p%d", text,
                               a, dt->fixed_exp);
        return 0;
    }
    if (!dt->has_scale) {
        if (f->kind == TCAST_KIND_INT)
            return tcast_fail_(err, n, "data type '%s': %s needs a scale (unscaled integer types are unsupported; a fixed scale is %s_pN)",
                               text, a, a);
        if (f->kind != TCAST_KIND_FLOAT)
            return tcast_fail_(err, n, "data type '%s': %s needs a scale (unscaled integer types are unsupported)", text, a);
        return 0;
    }
    const TcastScaleSpec* s = &dt->scale;
    tcast_number_code(&s->scale, b, sizeof(b));
    if (s->has_zero) tcast_number_code(&s->zero, c, sizeof(c));
    switch (f->kind) {
    case TCAST_KIND_FLOAT:
        if (s->scale.kind != TCAST_KIND_EXPONENT)
            return tcast_fail_(err, n, "data type '%s': float data %s takes an exponent scale (eXm0), not %s", text, a, b);
        if (s->has_zero) return tcast_fail_(err, n, "data type '%s': float data %s takes no zero point (%s)", text, a, c);
        break;
    case TCAST_KIND_INT:
        if (s->has_zero) return tcast_fail_(err, n, "data type '%s': int data %s takes no zero point (%s)", text, a, c);
        break;
    default:  // uint
        if (s->scale.kind != TCAST_KIND_FLOAT)
            return tcast_fail_(err, n, "data type '%s': uint data %s takes a float scale, not %s", text, a, b);
        // Reading: section 2's table gives uint data no "none" for the zero point
        if (!s->has_zero)
            return tcast_fail_(err, n, "data type '%s': uint data %s needs a zero point (a float or an intK) after the scale %s", text, a, b);
        break;
    }
    return 0;
}

// Parses one @ modifier (section 3) into dt.
static inline int tcast_parse_mod_(const char* text, const char* mod, TcastDataType* dt, char* err, size_t n) {
    static const char* const rounds[] = {"even", "nearest", "zero", "stochastic"};
    for (int r = 0; r < 4; r++)
        if (tcast_ieq_(mod, rounds[r])) {
            dt->round = (TcastRound)r;
            return 0;
        }
    if (tcast_ieq_(mod, "max") || tcast_ieq_(mod, "midmax")) {
        dt->scale_mode = tcast_ieq_(mod, "max") ? TCAST_SCALE_MAX : TCAST_SCALE_MIDMAX;
        return 0;
    }
    const char* p = mod;
    int m, k;
    if (!tcast_digits_(&p, &m) || *p++ != ':' || !tcast_digits_(&p, &k) || *p != '\0')
        return tcast_fail_(err, n, "data type '%s': unknown modifier '@%s' (even, nearest, zero, stochastic, max, midmax, M:N)", text, mod);
    if (m < 1 || m >= k || k > TCAST_SPARSE_N_MAX)
        return tcast_fail_(err, n, "data type '%s': sparsity %d:%d needs 1 <= M < N <= %d", text, m, k, TCAST_SPARSE_N_MAX);
    dt->sparse_m = m;
    dt->sparse_n = k;
    return 0;
}

// The scale code of a data type into d: a fixed scale pN (d->fixed) or a scale spec (d->has_scale).
static inline int tcast_parse_scale_part_(const char* code, TcastDataType* d, char* err, size_t n) {
    if (tcast_is_fixed_scale_(code)) {
        if (tcast_parse_fixed_scale(code, &d->fixed_exp, err, n) != 0) return -1;
        d->fixed = 1;
        return 0;
    }
    if (tcast_parse_scale(code, &d->scale, err, n) != 0) return -1;
    d->has_scale = 1;
    return 0;
}

// Section 3: parses DTYPE := (NAME | NUMBER[_SCALE]) {@MOD}. A predefined name (any case) is
// tried first on the text as given; otherwise one "torch." and one "float8_" prefix are removed,
// the text up to the first '_' is the number code and the rest the scale code. Checks every rule
// of sections 1-3. dt->name is the predefined name or the text before the first '@'.
// Reading: the prefixes are not removed before the predefined-name lookup ("torch.bfloat16" is
// the number code bfloat16, unscaled, named "torch.bfloat16").
static inline int tcast_parse_datatype(const char* text, TcastDataType* dt, char* err, size_t n) {
    char base[64], sub[256];
    TcastDataType d;
    memset(&d, 0, sizeof(d));
    d.round = TCAST_ROUND_EVEN;
    d.scale_mode = TCAST_SCALE_MAX;
    if (text == NULL) return tcast_fail_(err, n, "data type: missing");
    const char* at = strchr(text, '@');
    size_t len = at ? (size_t)(at - text) : strlen(text);
    if (len == 0) return tcast_fail_(err, n, "data type '%s': no number code or name before the modifiers", text);
    if (len >= sizeof(base)) return tcast_fail_(err, n, "data type '%.40s...': longer than %d characters", text, (int)sizeof(base) - 1);
    memcpy(base, text, len);
    base[len] = '\0';
    const char *pname, *pnum, *pscale;
    int found = 0;
    for (int i = 0; tcast_predefined(i, &pname, &pnum, &pscale) == 0; i++)
        if (tcast_ieq_(base, pname)) {
            found = 1;
            break;
        }
    if (found) {
        // table entries are valid by construction
        tcast_parse_number(pnum, &d.number, NULL, 0);
        if (pscale) tcast_parse_scale_part_(pscale, &d, NULL, 0);
        snprintf(d.name, sizeof(d.name), "%s", pname);
    } else {
        char num[64];
        const char* c = tcast_strip_prefixes_(base);
        const char* us = strchr(c, '_');
        size_t nl = us ? (size_t)(us - c) : strlen(c);
        memcpy(num, c, nl);
        num[nl] = '\0';
        if (tcast_parse_number_stripped_(num, num, &d.number, sub, sizeof(sub)) != 0)
            return tcast_fail_(err, n, "data type '%s': %s", text, sub);
        if (us && tcast_parse_scale_part_(us + 1, &d, sub, sizeof(sub)) != 0) return tcast_fail_(err, n, "data type '%s': %s", text, sub);
        snprintf(d.name, sizeof(d.name), "%s", base);
    }
    if (tcast_check_kinds_(text, &d, err, n) != 0) return -1;
    while (at) {
        const char* mod = at + 1;
        at = strchr(mod, '@');
        size_t ml = at ? (size_t)(at - mod) : strlen(mod);
        char mbuf[32];
        if (ml == 0) return tcast_fail_(err, n, "data type '%s': empty modifier", text);
        if (ml >= sizeof(mbuf)) return tcast_fail_(err, n, "data type '%s': modifier too long", text);
        memcpy(mbuf, mod, ml);
        mbuf[ml] = '\0';
        if (tcast_parse_mod_(text, mbuf, &d, err, n) != 0) return -1;
    }
    *dt = d;
    return 0;
}

static inline const char* tcast_round_name(TcastRound r) {
    static const char* const names[] = {"even", "nearest", "zero", "stochastic"};
    return (unsigned)r < 4u ? names[r] : "?";
}

static inline const char* tcast_scale_mode_name(TcastScaleMode m) {
    return m == TCAST_SCALE_MIDMAX ? "midmax" : "max";
}

// Canonical text of a data type, which tcast_parse_datatype accepts and maps to the same type
// (name aside): NUMBER[_SCALE[_ZERO][_tX[dY]] | _pN]@round@scalemode[@M:N], codes as tcast_number_code
// prints them (e.g. mxfp8e4 -> "e4m3b7fn_e8m0b127_t32@even@max", q115 -> "int16_p-1@even@max").
// Returns buf.
static inline const char* tcast_datatype_describe(const TcastDataType* dt, char* buf, size_t n) {
    char num[32], sc[112] = "", sp[16] = "";
    tcast_number_code(&dt->number, num, sizeof(num));
    if (dt->has_scale) {
        sc[0] = '_';
        tcast_scale_code(&dt->scale, sc + 1, sizeof(sc) - 1);
    } else if (dt->fixed) {
        snprintf(sc, sizeof(sc), "_p%d", dt->fixed_exp);
    }
    if (dt->sparse_n > 0) snprintf(sp, sizeof(sp), "@%d:%d", dt->sparse_m, dt->sparse_n);
    snprintf(buf, n, "%s%s@%s@%s%s", num, sc, tcast_round_name(dt->round), tcast_scale_mode_name(dt->scale_mode), sp);
    return buf;
}

#endif  // LLMC_NUMERICS_TCAST_SPEC_H
