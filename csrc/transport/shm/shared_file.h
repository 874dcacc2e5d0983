// Anonymous memory files shared between the processes of one host: the
// creator makes one with memfd_create and keeps its descriptor; a peer opens it
// through /proc/<creator pid>/fd/<fd> (which resolves only while the creator
// holds it open, so nothing can be left behind by a crash) and maps it. The
// engine's segment (segment.h) and the arena's blocks (arena.h) are such files.
#pragma once

#include <cstddef>
#include <string>

namespace fastcomm::shm {

// A memory file of `bytes` bytes, named `label` in /proc/<pid>/maps; its
// descriptor (close-on-exec). Throws c10::Error "<who>: ..." when the kernel
// refuses (no memfd, shared memory full).
int create_shared_file(const char* label, size_t bytes, const char* who);

// Where a peer opens the creator's file: "/proc/<pid>/fd/<fd>".
std::string shared_file_path(int pid, int fd);

// Opens another process's shared file at `path` (read-write or read-only) and
// checks that it has `bytes` bytes and belongs to this user. Returns the
// descriptor, or -1 with `why` saying what failed (the open's error, "it has
// N bytes, expected M", "it belongs to another user"; without the path).
int open_shared_file(const std::string& path, size_t bytes, bool writable, std::string& why);

}  // namespace fastcomm::shm
