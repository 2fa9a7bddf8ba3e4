/* file_io: reading a whole file into memory, with errors that name the file. */
#ifndef KIMI_FILE_IO_H
#define KIMI_FILE_IO_H

#include <stddef.h>

#include "engine/base/error.h"

/* Read path into a malloc'ed buffer with a NUL after its *size bytes. A missing file is
 * KIMI_ERR_MODEL (the caller named a file that should be there), other failures KIMI_ERR_IO or
 * KIMI_ERR_NOMEM. */
int file_read_all(const char *path, char **data, size_t *size, kimi_err *err);

#endif
