#include "sandbox/Confinement.h"

#include <linux/landlock.h>
#include <seccomp.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <initializer_list>

namespace hookscope {

namespace {

// Debian 12's kernel headers know Landlock ABI 2; the later rights have fixed values.
constexpr std::uint64_t kAccessFsTruncate = 1ULL << 14;  // ABI 3
constexpr std::uint64_t kAccessNetBindTcp = 1ULL << 0;   // ABI 4
constexpr std::uint64_t kAccessNetConnectTcp = 1ULL << 1;
struct RulesetAttr {  // landlock_ruleset_attr of ABI 4
  std::uint64_t handledAccessFs;
  std::uint64_t handledAccessNet;
};

// Landlock: every right that changes the file system, or runs a file, is handled, so none is
// allowed beyond the rules added (only /dev/null may be written).
int applyLandlock(const std::vector<std::string>& writable, std::string* error) {
  const long abi = ::syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  if (abi <= 0) return 0;  // no Landlock in this kernel
  RulesetAttr attr {};
  attr.handledAccessFs = LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE | LANDLOCK_ACCESS_FS_REMOVE_DIR |
                           LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_CHAR | LANDLOCK_ACCESS_FS_MAKE_DIR |
                           LANDLOCK_ACCESS_FS_MAKE_REG | LANDLOCK_ACCESS_FS_MAKE_SOCK | LANDLOCK_ACCESS_FS_MAKE_FIFO |
                           LANDLOCK_ACCESS_FS_MAKE_BLOCK | LANDLOCK_ACCESS_FS_MAKE_SYM;
  if (abi >= 2) attr.handledAccessFs |= LANDLOCK_ACCESS_FS_REFER;
  if (abi >= 3) attr.handledAccessFs |= kAccessFsTruncate;
  std::size_t size = sizeof(std::uint64_t);
  if (abi >= 4) {
    attr.handledAccessNet = kAccessNetBindTcp | kAccessNetConnectTcp;
    size = sizeof attr;
  }
  const int ruleset = int(::syscall(SYS_landlock_create_ruleset, &attr, size, 0));
  if (ruleset < 0) {
    *error = std::string("Landlock refused the rules: ") + std::strerror(errno);
    return -1;
  }
  const int devNull = ::open("/dev/null", O_PATH | O_CLOEXEC);
  if (devNull >= 0) {
    landlock_path_beneath_attr rule {};
    rule.allowed_access = LANDLOCK_ACCESS_FS_WRITE_FILE | (abi >= 3 ? kAccessFsTruncate : 0);
    rule.parent_fd = devNull;
    ::syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0);
    ::close(devNull);
  }
  for (const auto& folder : writable) {
    const int fd = ::open(folder.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
      *error = "cannot open " + folder + " to allow writes beneath it: " + std::strerror(errno);
      ::close(ruleset);
      return -1;
    }
    landlock_path_beneath_attr rule {};
    rule.allowed_access = attr.handledAccessFs & ~std::uint64_t(LANDLOCK_ACCESS_FS_EXECUTE);
    rule.parent_fd = fd;
    const long added = ::syscall(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0);
    ::close(fd);
    if (added != 0) {
      *error = "Landlock refused to allow writes beneath " + folder + ": " + std::strerror(errno);
      ::close(ruleset);
      return -1;
    }
  }
  const long rc = ::syscall(SYS_landlock_restrict_self, ruleset, 0);
  ::close(ruleset);
  if (rc != 0) {
    *error = std::string("Landlock could not confine the process: ") + std::strerror(errno);
    return -1;
  }
  return int(abi);
}

bool applySeccomp(std::string* error) {
  scmp_filter_ctx ctx = ::seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx) {
    *error = "seccomp is not available";
    return false;
  }
  int rc = 0;
  const auto deny = SCMP_ACT_ERRNO(EPERM);
  for (int call : {SCMP_SYS(execve), SCMP_SYS(execveat), SCMP_SYS(fork), SCMP_SYS(vfork), SCMP_SYS(ptrace),
                   SCMP_SYS(process_vm_readv), SCMP_SYS(process_vm_writev), SCMP_SYS(socket), SCMP_SYS(connect),
                   SCMP_SYS(bind), SCMP_SYS(listen), SCMP_SYS(accept), SCMP_SYS(accept4), SCMP_SYS(mount),
                   SCMP_SYS(umount2), SCMP_SYS(pivot_root), SCMP_SYS(chroot), SCMP_SYS(unshare), SCMP_SYS(setns),
                   SCMP_SYS(bpf), SCMP_SYS(perf_event_open), SCMP_SYS(kexec_load), SCMP_SYS(init_module),
                   SCMP_SYS(finit_module), SCMP_SYS(delete_module), SCMP_SYS(keyctl), SCMP_SYS(add_key),
                   SCMP_SYS(request_key), SCMP_SYS(userfaultfd), SCMP_SYS(io_uring_setup), SCMP_SYS(pidfd_open),
                   SCMP_SYS(pidfd_send_signal), SCMP_SYS(tkill)}) {
    rc |= ::seccomp_rule_add(ctx, deny, call, 0);
  }
  // Threads, yes (CLONE_THREAD); new processes, no. clone3 hides its flags in memory, so it
  // says "not here" and glibc falls back to clone.
  rc |= ::seccomp_rule_add(ctx, deny, SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0));
  rc |= ::seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
  // Signals to itself only, whichever call sends them (a pid of 0 or below is a group: refused).
  const auto self = scmp_datum_t(::getpid());
  for (int call : {SCMP_SYS(kill), SCMP_SYS(tgkill), SCMP_SYS(rt_sigqueueinfo), SCMP_SYS(rt_tgsigqueueinfo)}) {
    rc |= ::seccomp_rule_add(ctx, deny, call, 1, SCMP_A0(SCMP_CMP_NE, self));
  }
  // No typing into a terminal (TIOCSTI pushes bytes a shell then runs; TIOCLINUX can paste a
  // console's selection); the kernel reads the request as 32 bits, so only those are compared.
  for (unsigned long request : {static_cast<unsigned long>(TIOCSTI), static_cast<unsigned long>(TIOCLINUX)}) {
    rc |= ::seccomp_rule_add(ctx, deny, SCMP_SYS(ioctl), 1, SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, request));
  }
  // No change to any file's mode, owner, times or extended attributes: Landlock does not cover
  // them, and a file only read (in $HOME, say) could be made world-writable or backdated.
  for (int call : {SCMP_SYS(chmod), SCMP_SYS(fchmod), SCMP_SYS(fchmodat), SCMP_SYS(chown), SCMP_SYS(fchown),
                   SCMP_SYS(lchown), SCMP_SYS(fchownat), SCMP_SYS(utime), SCMP_SYS(utimes), SCMP_SYS(futimesat),
                   SCMP_SYS(utimensat), SCMP_SYS(setxattr), SCMP_SYS(lsetxattr), SCMP_SYS(fsetxattr),
                   SCMP_SYS(removexattr), SCMP_SYS(lremovexattr), SCMP_SYS(fremovexattr)}) {
    rc |= ::seccomp_rule_add(ctx, deny, call, 0);
  }
  // fchmodat2 (Linux 6.6), unknown to Debian 12's headers: the number every architecture shares.
  constexpr int kFchmodat2 = 452;
  rc |= ::seccomp_rule_add(ctx, deny, kFchmodat2, 0);
  if (rc == 0) rc = ::seccomp_load(ctx);
  ::seccomp_release(ctx);
  if (rc != 0) {
    *error = std::string("seccomp could not confine the process: ") + std::strerror(-rc);
    return false;
  }
  return true;
}

} // namespace

std::string Confinement::describe() const {
  std::string out = landlockAbi > 0 ? "no file writes (Landlock " + std::to_string(landlockAbi) + ")"
                                    : "file writes NOT confined (this kernel has no Landlock)";
  if (landlockAbi > 0 && !writable.empty()) {
    out = "no file writes outside " + writable.front() + " (Landlock " + std::to_string(landlockAbi) + ")";
  }
  out += seccomp ? ", no programs, processes, network, signals to others, typing into a terminal or changes to "
                   "files' modes, times and attributes (seccomp)"
                 : ", no seccomp";
  return out;
}

bool confineProcess(Confinement* done, std::string* error, const std::vector<std::string>& writableFolders) {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    *error = std::string("cannot set no_new_privs: ") + std::strerror(errno);
    return false;
  }
  const int abi = applyLandlock(writableFolders, error);
  if (abi < 0) return false;
  done->landlockAbi = abi;
  done->writable = writableFolders;
  if (!applySeccomp(error)) return false;
  done->seccomp = true;
  return true;
}

} // namespace hookscope
