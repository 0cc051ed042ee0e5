/* The kernel's floor for one scrape: open, read and close every regular file under a directory
 * tree (relative openat, one read of up to a page, as the exporter does), in one thread.
 * Usage: read_floor DIR [PASSES]; prints "<files> <CPU milliseconds per pass>" (CPU time, not
 * wall time, so that a busy machine does not inflate it). */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static char buf[4097];
static long files;

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
      if (fd >= 0) { if (read(fd, buf, sizeof buf) >= 0) files++; close(fd); }
    }
  }
  closedir(dir);
}

int main(int argc, char **argv) {
  if (argc < 2) { fprintf(stderr, "usage: %s DIR [PASSES]\n", argv[0]); return 2; }
  int passes = argc > 2 ? atoi(argv[2]) : 50;
  struct timespec start, end;
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
