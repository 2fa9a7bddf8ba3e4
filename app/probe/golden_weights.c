/* golden_weights: the weights section of kimi-probe golden; rows of linears dequantized by
 * the loader and the CPU decoders compared bit for bit with reference/weights_probe.f32. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "app/probe/golden.h"
#include "engine/model/weights.h"
#include "kernels/cpu/numeric.h"

/* The reference names the stored dtype of .weight: U8 for NVFP4, else the float type. */
static const char *format_dtype(weight_format format)
{
    switch (format) {
    case WEIGHT_NVFP4: return "U8";
    case WEIGHT_BF16: return "BF16";
    case WEIGHT_F16: return "F16";
    case WEIGHT_F32: return "F32";
    }
    return "?";
}

/* One reference entry: shape and dtype agree, then every row's bits equal the reference's. */
static void check_linear(golden_run *g, const model_weights *mw, json_t *entry, const float *ref, size_t ref_floats)
{
    const char *name = json_string_value(json_object_get(entry, "linear"));
    const char *want_dtype = json_string_value(json_object_get(entry, "dtype"));
    json_t *shape = json_object_get(entry, "shape"), *rows = json_object_get(entry, "rows");
    json_t *offset = json_object_get(entry, "offset");
    if (!name || !want_dtype || json_array_size(shape) != 2 || !json_is_array(rows) || !json_is_integer(offset) ||
        json_integer_value(offset) < 0) {
        golden_case(g, 0, name ? name : "weights_probe.json", "malformed entry (linear, dtype, shape, rows, offset)");
        return;
    }
    const linear *l = weights_find_linear(mw, name);
    if (!l) {
        golden_case(g, 0, name, "no such linear in the checkpoint");
        return;
    }
    json_int_t n = json_integer_value(json_array_get(shape, 0)), k = json_integer_value(json_array_get(shape, 1));
    if (n != l->w.rows || k != l->w.cols || strcmp(want_dtype, format_dtype(l->w.format))) {
        golden_case(g, 0, name, "loaded %s [%d, %d], reference %s [%lld, %lld]", format_dtype(l->w.format), l->w.rows,
                    l->w.cols, want_dtype, (long long)n, (long long)k);
        return;
    }
    float *row = malloc((size_t)l->w.cols * sizeof *row);     /* [cols] */
    if (!row) {
        golden_case(g, 0, name, "out of memory");
        return;
    }
    size_t at = (size_t)json_integer_value(offset), mismatches = 0, compared = 0;
    size_t cols = (size_t)l->w.cols;
    int first_bad_row = -1, first_bad_col = -1, ok = 1;
    for (size_t i = 0; ok && i < json_array_size(rows); i++) {
        json_t *r = json_array_get(rows, i);
        if (!json_is_integer(r) || json_integer_value(r) < 0 || json_integer_value(r) >= l->w.rows ||
            at > ref_floats || ref_floats - at < cols) {
            ok = 0;
            break;
        }
        int index = (int)json_integer_value(r);
        weight_matrix_decode_row(&l->w, index, row);
        for (size_t c = 0; c < cols; c++, compared++) {
            if (memcmp(&row[c], &ref[at + c], sizeof(float))) {
                if (!mismatches++) {
                    first_bad_row = index;
                    first_bad_col = (int)c;
                }
            }
        }
        at += cols;
    }
    if (!ok)
        golden_case(g, 0, name, "rows or offset outside the linear or weights_probe.f32");
    else if (mismatches)
        golden_case(g, 0, name, "%zu of %zu values differ in bits (first at row %d col %d)", mismatches, compared,
                    first_bad_row, first_bad_col);
    else
        golden_case(g, 1, name, "%s %zu values bit-exact", format_dtype(l->w.format), compared);
    free(row);
}

int golden_weights(golden_run *g, kimi_err *err)
{
    void *index_text = NULL, *values = NULL;
    size_t index_bytes, value_bytes;
    if (golden_read_file(g, "weights_probe.json", &index_text, &index_bytes, err))
        return err->code;
    json_error_t jerr;
    json_t *index = json_loadb(index_text, index_bytes, 0, &jerr);
    free(index_text);
    if (!index)
        return kimi_fail(err, KIMI_ERR_INPUT, "%s/weights_probe.json: not valid JSON: %s (line %d)", g->reference_dir,
                         jerr.text, jerr.line);
    json_t *linears = json_object_get(index, "linears");
    const char *file = json_string_value(json_object_get(index, "file"));
    if (!json_is_array(linears) || !file || strchr(file, '/')) {
        json_decref(index);
        return kimi_fail(err, KIMI_ERR_INPUT, "%s/weights_probe.json: needs \"file\" and a \"linears\" array",
                         g->reference_dir);
    }
    if (golden_read_file(g, file, &values, &value_bytes, err)) {
        json_decref(index);
        return err->code;
    }
    model_weights mw;
    if (weights_load(&mw, g->model_dir, err)) {
        free(values);
        json_decref(index);
        return err->code;
    }
    for (size_t i = 0; i < json_array_size(linears); i++)
        check_linear(g, &mw, json_array_get(linears, i), values, value_bytes / sizeof(float));
    weights_free(&mw);
    free(values);
    json_decref(index);
    return 0;
}
