// Opening the user's files safely: only regular files are read (a FIFO would block the open or
// the read forever, and a directory reads as empty input), sizes are known before anything is
// allocated, and every error names the file. Used by every binary that reads a path it was given.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

namespace files {

struct FileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What a path is, for messages: "a directory", "a FIFO", ...
inline const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

// Opens path for reading if it is a regular file (after following links); *size gets its size.
// The open itself does not block: O_NONBLOCK is set for it (a FIFO with no writer would
// otherwise wait forever) and cleared once the file is known to be regular.
inline FILE* open_regular(const std::string& path, size_t* size = nullptr, const char* what = "file") {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw FileError(path + ": cannot open the " + what + " (" + std::strerror(errno) + ")");
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string kind = fstat(fd, &st) == 0 ? kind_of(st.st_mode) : "unreadable";
    ::close(fd);
    throw FileError(path + ": the " + std::string(what) + " is " + kind + ", not a regular file");
  }
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    ::close(fd);
    throw FileError(path + ": cannot read the " + what);
  }
  FILE* f = fdopen(fd, "rb");
  if (!f) {
    ::close(fd);
    throw FileError(path + ": cannot read the " + what);
  }
  if (size) *size = (size_t)st.st_size;
  return f;
}

// The whole of a regular file, refusing files larger than max_bytes before reading them.
inline std::string read_regular(const std::string& path, size_t max_bytes, const char* what = "file") {
  size_t size = 0;
  FILE* f = open_regular(path, &size, what);
  if (size > max_bytes) {
    std::fclose(f);
    throw FileError(path + ": the " + std::string(what) + " is " + std::to_string(size) + " bytes, more than the " +
                    std::to_string(max_bytes) + " this reader accepts");
  }
  std::string out(size, '\0');
  const bool ok = size == 0 || std::fread(&out[0], 1, size, f) == size;
  std::fclose(f);
  if (!ok) throw FileError(path + ": read failed");
  return out;
}

// True when path names an existing entry of any kind (a dangling link counts).
inline bool exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

}  // namespace files
