/* A one-line progress bar on stderr for the sluice-* tools. It draws only when stderr is a
 * terminal, so logs, pipes and tests see nothing; it redraws at most ten times a second so
 * that calling it per record costs one clock read. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sluice/util.h"
#include "tool.h"

void sl__progress_start(sl__progress *p, const char *label, uint64_t total) {
    memset(p, 0, sizeof *p);
    p->on = isatty(STDERR_FILENO) == 1;
    p->label = label ? label : "";
    p->total = total;
    p->t0 = p->last = sl_now_s();
}

static void human(double v, char *out, size_t cap) {
    if (v >= 1e9) snprintf(out, cap, "%.1fG", v / 1e9);
    else if (v >= 1e6) snprintf(out, cap, "%.1fM", v / 1e6);
    else if (v >= 1e4) snprintf(out, cap, "%.1fk", v / 1e3);
    else snprintf(out, cap, "%.0f", v);
}

static void draw(sl__progress *p, double now) {
    char line[256], rate[32];
    double dt = now - p->t0;
    human(dt > 0 ? (double)p->done / dt : 0, rate, sizeof rate);
    int n;
    if (p->total) {
        enum { BAR = 30 };
        double frac = p->done >= p->total ? 1.0 : (double)p->done / (double)p->total;
        int fill = (int)(frac * BAR);
        char bar[BAR + 1];
        for (int i = 0; i < BAR; i++) bar[i] = i < fill ? '#' : '.';
        bar[BAR] = 0;
        double eta = frac > 0 ? dt / frac - dt : 0;
        n = snprintf(line, sizeof line, "\r%s [%s] %3d%% %llu/%llu %s/s eta %.0fs", p->label,
                     bar, (int)(frac * 100), (unsigned long long)p->done,
                     (unsigned long long)p->total, rate, eta);
    } else {
        n = snprintf(line, sizeof line, "\r%s %llu %s/s", p->label,
                     (unsigned long long)p->done, rate);
    }
    if (n < 0) return;
    if (n >= (int)sizeof line) n = (int)sizeof line - 1;
    fputs(line, stderr);
    /* Blank what a longer previous line left behind. */
    for (int i = n; i < p->width; i++) fputc(' ', stderr);
    fflush(stderr);
    if (n > p->width) p->width = n;
    p->last = now;
}

void sl__progress_set(sl__progress *p, uint64_t done) {
    p->done = done;
    if (!p->on) return;
    double now = sl_now_s();
    if (now - p->last >= 0.1) draw(p, now);
}

void sl__progress_end(sl__progress *p) {
    if (!p->on || p->width == 0) {
        p->on = false;
        return;
    }
    fputc('\r', stderr);
    for (int i = 0; i < p->width; i++) fputc(' ', stderr);
    fputc('\r', stderr);
    fflush(stderr);
    p->on = false;
    p->width = 0;
}
