/* The kernel's floor for one scrape: open, read and close every regular file under a directory
 * tree (relative openat, one read of up to a page, as the exporter does), in one thread.
 * Usage: read_floor DIR [PASSES] [held]; prints "<files> <CPU milliseconds per pass>" (CPU time,
 * not wall time, so that a busy machine does not inflate it). With "held", every file is opened
 * once beforehand and a pass is one pread at offset 0 of each: the floor of a reader that keeps
 * its files open between scrapes, as hpcnode_exporter does. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static char buf[4097];
static long files;
/* With "held": the descriptors the first walk left open, read again by every pass. */
static int held_mode;
static int *held;
static long held_len, held_cap;

static void walk(int dfd) {
  DIR *dir = fdopendir(openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  struct dirent *entry;
  if (!dir) return;
  while ((entry = readdir(dir))) {
    if (entry->d_name[0] == '.') continue;
    if (entry->d_type == DT_DIR) {
      int sub = openat(dfd, entry->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (sub >= 0) { walk(sub); close(sub); }
    } else if (entry->d_type == DT_REG) {
      int fd = openat(dfd, entry->d_name, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd < 0) continue;
      if (read(fd, buf, sizeof buf) >= 0) files++;
      if (!held_mode) { close(fd); continue; }
      if (held_len == held_cap) {
        held_cap = held_cap ? 2 * held_cap : 1024;
        held = realloc(held, held_cap * sizeof *held);
        if (!held) { perror("realloc"); exit(1); }
      }
      held[held_len++] = fd;
    }
  }
  closedir(dir);
}

int main(int argc, char **argv) {
  if (argc < 2) { fprintf(stderr, "usage: %s DIR [PASSES]\n", argv[0]); return 2; }
  int passes = argc > 2 ? atoi(argv[2]) : 50;
  held_mode = argc > 3 && !strcmp(argv[3], "held");
  struct timespec start, end;
  if (held_mode) {
    /* Thousands of files held: the soft descriptor limit up to the hard one. */
    struct rlimit limit;
    if (!getrlimit(RLIMIT_NOFILE, &limit)) {
      limit.rlim_cur = limit.rlim_max;
      setrlimit(RLIMIT_NOFILE, &limit);
    }
    int root = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root < 0) { perror(argv[1]); return 1; }
    walk(root);
    close(root);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &start);
    for (int i = 0; i < passes; i++)
      for (long f = 0; f < held_len; f++) (void)pread(held[f], buf, sizeof buf, 0);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &end);
    double ms = (end.tv_sec - start.tv_sec) * 1e3 + (end.tv_nsec - start.tv_nsec) / 1e6;
    printf("%ld %.3f\n", held_len, ms / passes);
    return 0;
  }
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &start);
  for (int i = 0; i < passes; i++) {
    files = 0;
    int root = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root < 0) { perror(argv[1]); return 1; }
    walk(root);
    close(root);
  }
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &end);
  double ms = (end.tv_sec - start.tv_sec) * 1e3 + (end.tv_nsec - start.tv_nsec) / 1e6;
  printf("%ld %.3f\n", files, ms / passes);
  return 0;
}
