#include "transport/shm/shared_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <c10/util/Exception.h>

namespace fastcomm::shm {

int create_shared_file(const char* label, size_t bytes, const char* who) {
  const int fd = ::memfd_create(label, MFD_CLOEXEC);
  TORCH_CHECK(fd >= 0, who, ": memfd_create failed: ", std::strerror(errno));
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int error = errno;
    ::close(fd);
    TORCH_CHECK(false, who, ": ftruncate to ", bytes, " bytes failed (is shared memory full?): ", std::strerror(error));
  }
  return fd;
}

std::string shared_file_path(int pid, int fd) {
  return "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
}

int open_shared_file(const std::string& path, size_t bytes, bool writable, std::string& why) {
  const int fd = ::open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) {
    why = std::string(std::strerror(errno)) +
          " (its creator has exited, or is another user's or another pid namespace's process)";
    return -1;
  }
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    why = std::string("fstat failed: ") + std::strerror(errno);
  } else if (static_cast<size_t>(st.st_size) != bytes) {
    why = "it has " + std::to_string(st.st_size) + " bytes, expected " + std::to_string(bytes);
  } else if (st.st_uid != ::geteuid()) {
    why = "it belongs to another user";
  } else {
    return fd;
  }
  ::close(fd);
  return -1;
}

}  // namespace fastcomm::shm
