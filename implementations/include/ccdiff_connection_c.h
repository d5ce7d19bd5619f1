/*
 * What every C connection shim shares (docs/connection-mode.md): the wrappers that
 * make a read of the real clock visible, the seeded generator, and the contract's
 * options.  Include it in the one file of a shim that defines the ccd_conn_*
 * functions, after ccdiff_connection.h: it defines the wrappers, so it is included
 * once per library.
 *
 * The real clock: a shim links its stack with -Wl,--wrap=gettimeofday,
 * --wrap=clock_gettime and --wrap=time, so every read by anything linked in (the
 * stack, its TLS library, the shim) goes through these wrappers and is counted;
 * a shim compares the count around each call and fails the call when it moved
 * (virtual time only, never the machine's).
 */
#ifndef CCDIFF_CONNECTION_C_H
#define CCDIFF_CONNECTION_C_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

/* ------------------------------------------------------------ the real clock */

static uint64_t real_clock_reads;
int __real_gettimeofday(struct timeval *tv, void *tz);
int __real_clock_gettime(clockid_t id, struct timespec *ts);
time_t __real_time(time_t *t);

int __wrap_gettimeofday(struct timeval *tv, void *tz)
{
  real_clock_reads++;
  return __real_gettimeofday(tv, tz);
}

int __wrap_clock_gettime(clockid_t id, struct timespec *ts)
{
  real_clock_reads++;
  return __real_clock_gettime(id, ts);
}

time_t __wrap_time(time_t *t)
{
  real_clock_reads++;
  return __real_time(t);
}

/* ------------------------------------------------------------ seeded randomness */

/* SplitMix64: the run's seed -> the stack's random draws (connection IDs, tokens,
 * the stack's own generator), the same on every run of one seed. */
static uint64_t splitmix64(uint64_t *x)
{
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* ------------------------------------------------------------ the options */

typedef struct {
  size_t mds;     /* mds=N: the maximum UDP payload */
  int reno;       /* cc=reno (set by the shim's own option hook) */
  char cert[1024];
  char key[1024];
} ccd_options_t;

/* A shim's own options: 0 when it took key=value, -1 with err written when it refuses
 * it (a bad value, an option it names and declines), 1 when it does not know it. */
typedef int (*ccd_option_hook)(const char *key, const char *value, ccd_options_t *o, char *err, size_t err_len);

/* "key=value;key=value" (blanks around keys and values ignored) into o: mds, within
 * [min_mds, max_mds] (`limits` says why, e.g. "RFC 9000 §14"), cert and key here,
 * every other key through `hook`; an unknown key is refused by name with the list
 * `known` of what `stack` takes.  0, or -1 with a one-line reason in err. */
static int ccd_parse_options(const char *text, ccd_options_t *o, const char *stack, const char *known,
                             size_t min_mds, size_t max_mds, const char *limits, ccd_option_hook hook,
                             char *err, size_t err_len)
{
  memset(o, 0, sizeof(*o));
  o->mds = min_mds;
  if (text == NULL) return 0;
  const char *p = text;
  while (*p) {
    const char *end = strchr(p, ';');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    char item[1200];
    if (n >= sizeof(item)) {
      snprintf(err, err_len, "an option is longer than %zu bytes", sizeof(item) - 1);
      return -1;
    }
    memcpy(item, p, n);
    item[n] = 0;
    p += n + (end ? 1 : 0);
    char *k = item;
    while (*k == ' ' || *k == '\t') k++;
    if (*k == 0) continue;
    char *eq = strchr(k, '=');
    if (eq == NULL) {
      snprintf(err, err_len, "option \"%.200s\" is not key=value", k);
      return -1;
    }
    *eq = 0;
    char *v = eq + 1;
    for (char *t = eq - 1; t >= k && (*t == ' ' || *t == '\t'); t--) *t = 0;
    while (*v == ' ' || *v == '\t') v++;
    for (char *t = v + strlen(v) - 1; t >= v && (*t == ' ' || *t == '\t'); t--) *t = 0;
    if (strcmp(k, "mds") == 0) {
      char *stop = NULL;
      errno = 0;
      unsigned long long m = strtoull(v, &stop, 10);
      if (errno != 0 || stop == v || *stop != 0) {
        snprintf(err, err_len, "mds=%s: not a number", v);
        return -1;
      }
      if (m < min_mds || m > max_mds) {
        snprintf(err, err_len, "mds=%llu: %s needs %zu..%zu (%s)", m, stack, min_mds, max_mds, limits);
        return -1;
      }
      o->mds = (size_t)m;
    } else if (strcmp(k, "cert") == 0) {
      snprintf(o->cert, sizeof(o->cert), "%s", v);
    } else if (strcmp(k, "key") == 0) {
      snprintf(o->key, sizeof(o->key), "%s", v);
    } else {
      int took = hook(k, v, o, err, err_len);
      if (took < 0) return -1;
      if (took > 0) {
        snprintf(err, err_len, "unknown option \"%.200s\" (%s takes %s)", k, stack, known);
        return -1;
      }
    }
  }
  return 0;
}

static int ccd_readable(const char *path)
{
  FILE *f = fopen(path, "rb");
  if (f == NULL) return 0;
  fclose(f);
  return 1;
}

#endif
