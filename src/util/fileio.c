/* fileio.c: mmap and whole-file reads with the checks the loaders rely on
 * (regular files only, size caps, clear messages naming the path). */
#include "util/fileio.h"
#include "util/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static sp_status open_regular(const char *path, int *fd_out, size_t *size_out, sp_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sp_err(err, SP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return sp_err(err, SP_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return sp_err(err, SP_ERR_IO, "%s: not a regular file", path);
    }
    *fd_out = fd;
    *size_out = (size_t)st.st_size;
    return SP_OK;
}

sp_status sp_mapped_file_open(const char *path, sp_mapped_file *out, sp_error *err)
{
    memset(out, 0, sizeof *out);
    int fd = -1;
    size_t size = 0;
    sp_status st = open_regular(path, &fd, &size, err);
    if (st != SP_OK)
        return st;
    void *p = NULL;
    if (size > 0) {
        p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return sp_err(err, SP_ERR_IO, "%s: mmap failed: %s", path, strerror(e));
        }
    }
    out->data = p;
    out->n_bytes = size;
    out->fd = fd;
    out->path = strdup(path);
    if (!out->path) {
        if (p)
            munmap(p, size);
        close(fd);
        out->data = NULL;
        return sp_err(err, SP_ERR_NOMEM, "%s: out of memory", path);
    }
    return SP_OK;
}

void sp_mapped_file_close(sp_mapped_file *f)
{
    if (!f)
        return;
    if (f->data && f->n_bytes)
        munmap((void *)f->data, f->n_bytes);
    if (f->path)
        close(f->fd);
    free(f->path);
    memset(f, 0, sizeof *f);
}

sp_status sp_mapped_file_read(const sp_mapped_file *f, size_t off, void *dst, size_t n, sp_error *err)
{
    if (!f->path || off > f->n_bytes || n > f->n_bytes - off)
        return sp_err(err, SP_ERR_INTERNAL, "%s: read of %zu bytes at %zu past its %zu bytes",
                      f->path ? f->path : "(no file)", n, off, f->n_bytes);
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(f->fd, (char *)dst + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return sp_err(err, SP_ERR_IO, "%s: read failed: %s", f->path,
                          r == 0 ? "unexpected end of file" : strerror(errno));
        got += (size_t)r;
    }
    return SP_OK;
}

void sp_mapped_file_release(const sp_mapped_file *f)
{
    if (f && f->data && f->n_bytes)
        (void)madvise((void *)f->data, f->n_bytes, MADV_DONTNEED); /* advice: failure is harmless */
}

sp_status sp_read_file(const char *path, size_t max_bytes, char **out, size_t *n_bytes,
                       sp_error *err)
{
    *out = NULL;
    int fd = -1;
    size_t size = 0;
    sp_status st = open_regular(path, &fd, &size, err);
    if (st != SP_OK)
        return st;
    if (size > max_bytes) {
        close(fd);
        return sp_err(err, SP_ERR_LIMIT, "%s: file is %zu bytes, more than the %zu allowed",
                      path, size, max_bytes);
    }
    char *buf = malloc(size + 1);
    if (!buf) {
        close(fd);
        return sp_err(err, SP_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, size);
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = errno;
            free(buf);
            close(fd);
            return sp_err(err, SP_ERR_IO, "%s: read failed: %s", path,
                          r == 0 ? "unexpected end of file" : strerror(e));
        }
        got += (size_t)r;
    }
    close(fd);
    buf[size] = '\0';
    *out = buf;
    if (n_bytes)
        *n_bytes = size;
    return SP_OK;
}

bool sp_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

bool sp_dir_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

char *sp_path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    size_t n = a;
    if (a > 0 && dir[a - 1] != '/')
        p[n++] = '/';
    memcpy(p + n, name, b + 1);
    return p;
}

const char *sp_path_basename(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}
