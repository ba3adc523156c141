/*
 * Times a contest peer's exact 5-NN search (`search_knn` of
 * nelsonsimionato/rinha-backend-2026, c-impl) over the query vectors that
 * `sagitta-fraud check --vectors` writes: 14 little-endian int16 codes
 * (value x 10^4) per query. Sagitta's own code, compiled by peer.sh against
 * the peer's unmodified sources; it is never linked into Sagitta.
 *
 *   search_bench INDEX.bin VECTORS.i16
 *
 * Prints the time per query of a second pass over the vectors (the first
 * warms the branch predictors, as `sagitta-fraud check` does) and the
 * number of queries with 3 or more frauds among the 5 (denied); then, as
 * `check` does, the first 1000 queries cold: 64 MiB of other memory read
 * before each, so neither the caches nor the TLB hold the index.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "index.h"
#include "search.h"

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s INDEX.bin VECTORS.i16\n", argv[0]);
		return 2;
	}
	if (index_load(argv[1]) != 0) {
		fprintf(stderr, "cannot load %s\n", argv[1]);
		return 1;
	}
	FILE *f = fopen(argv[2], "rb");
	if (!f) {
		perror(argv[2]);
		return 1;
	}
	fseek(f, 0, SEEK_END);
	long bytes = ftell(f);
	fseek(f, 0, SEEK_SET);
	size_t n = (size_t)bytes / (14 * sizeof(int16_t));
	int16_t (*q)[RECORD_STRIDE] = calloc(n, sizeof(*q));
	double *t = malloc(n * sizeof(double));
	if (!q || !t || n == 0)
		return 1;
	for (size_t i = 0; i < n; i++)
		if (fread(q[i], sizeof(int16_t), 14, f) != 14)
			return 1;
	fclose(f);

	SearchState st;
	Neighbor out[K];
	size_t denied = 0;
	for (int pass = 0; pass < 2; pass++) {
		denied = 0;
		for (size_t i = 0; i < n; i++) {
			double t0 = now_us();
			search_knn(q[i], &st, out);
			t[i] = now_us() - t0;
			int frauds = 0;
			for (int j = 0; j < K; j++)
				frauds += is_fraud[out[j].node_idx] ? 1 : 0;
			denied += frauds >= 3;
		}
	}
	size_t cold = n < 1000 ? n : 1000;
	size_t evict_len = (size_t)64 << 20;
	unsigned char *evict = malloc(evict_len);
	double *tc = malloc(cold * sizeof(double));
	if (!evict || !tc)
		return 1;
	memset(evict, 1, evict_len);
	unsigned acc = 0;
	for (size_t i = 0; i < cold; i++) {
		for (size_t j = 0; j < evict_len; j += 64) {
			acc += evict[j];
			if (j % 4096 == 0)
				evict[j] = (unsigned char)acc;
		}
		double t0 = now_us();
		search_knn(q[i], &st, out);
		tc[i] = now_us() - t0;
	}
	double csum = 0;
	for (size_t i = 0; i < cold; i++)
		csum += tc[i];
	qsort(tc, cold, sizeof(double), by_value);

	double sum = 0;
	for (size_t i = 0; i < n; i++)
		sum += t[i];
	qsort(t, n, sizeof(double), by_value);
	printf("%zu queries (%zu denied): mean %.2f us, p50 %.2f us, p99 %.2f us, max %.1f us\n",
	       n, denied, sum / (double)n, t[(size_t)((double)(n - 1) * 0.5)],
	       t[(size_t)((double)(n - 1) * 0.99)], t[n - 1]);
	printf("cold (64 MiB read before each, %zu queries): mean %.2f us, p50 %.2f us, p99 %.2f us, max %.1f us (%u)\n",
	       cold, csum / (double)cold, tc[(size_t)((double)(cold - 1) * 0.5)],
	       tc[(size_t)((double)(cold - 1) * 0.99)], tc[cold - 1], acc & 1);
	return 0;
}
