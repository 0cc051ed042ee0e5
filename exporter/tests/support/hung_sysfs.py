#!/usr/bin/python3
"""A FUSE filesystem whose files hang on read, like a sysfs attribute of a wedged driver.

Usage: hung_sysfs.py MOUNTPOINT FILE...   (runs in the foreground until unmounted)

Every FILE is a regular file; read() blocks until the filesystem is unmounted. Used by the
integration tests to prove a hung read cannot hang a scrape or pile up threads.
"""
import errno
import stat
import sys
import threading

import fusepy

RELEASE = threading.Event()


class HungFiles(fusepy.Operations):
    def __init__(self, names):
        self.names = set(names)

    def getattr(self, path, fh=None):
        if path == "/":
            return {"st_mode": stat.S_IFDIR | 0o755, "st_nlink": 2}
        if path[1:] in self.names:
            return {"st_mode": stat.S_IFREG | 0o444, "st_nlink": 1, "st_size": 4096}
        raise fusepy.FuseOSError(errno.ENOENT)

    def readdir(self, path, fh):
        return [".", ".."] + sorted(self.names)

    def read(self, path, size, offset, fh):
        RELEASE.wait()
        return b"0\n"

    def destroy(self, path):
        RELEASE.set()


if __name__ == "__main__":
    fusepy.FUSE(HungFiles(sys.argv[2:]), sys.argv[1], foreground=True, nothreads=False, ro=True)
