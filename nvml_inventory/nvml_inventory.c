/*
 * gct-nvml-inventory LIBRARY MIG_MINORS TIMEOUT_SECONDS
 *
 * Prints the transcript of the NVML answers a GPU inventory is made of: the lines, their order and formats
 * of cdi/nvml.py's inventory_from_transcript docstring, each ending in "\n", byte for byte as cdi/nvml.py
 * records them when it reads NVML in its own process. It mirrors that reader (_read_in_process, _read_gpu,
 * _gi_profiles, _read_mig_devices) and cdi/nvml_binding.py: the same calls through the same symbols (the versioned
 * ones, and the v1 profile calls when the library lacks the V ones), the same buffer sizes, the same
 * struct layouts (cdi/nvml_abi.h, the declarations the binding is generated from), and the same errors
 * passed over (NOT_SUPPORTED for the architecture and the MIG mode, any error of a GPU-instance profile
 * index, NOT_FOUND for an empty MIG slot).
 *
 * Why it exists: every program reads NVML through it (cdi/nvml.py's load_inventory turns the transcript
 * into an inventory), so that a library that hangs or crashes ends in one line, not with the program (see
 * below). And in jit-cdi mode the runtime shim's create would start Python (~20 ms) to rebuild container
 * edits that are nearly always those of the last time: the static launcher, which cannot dlopen, runs this
 * program, compares its output with the transcript Python recorded when it last built the edits, and
 * applies the cached edits only when the two are equal.
 *
 *   LIBRARY          what cdi.nvml.loaded_library names: the library's absolute path, or a bare
 *                    soname for the loader to search (as cffi's dlopen does for Python)
 *   MIG_MINORS       the driver's proc driver/nvidia-caps/mig-minors file (a missing one is a line too)
 *   TIMEOUT_SECONDS  the bound of the whole run: digits, optionally a point and more digits, more than
 *                    0 and at most 3600 (cdi.nvml.MAX_NVML_TIMEOUT)
 *
 * The driver library runs in a child process (a fork, before anything of it is loaded); this program
 * only waits for it, at most TIMEOUT_SECONDS, and reports. So a library that never finishes loading (a
 * constructor that hangs), an nvmlInit or a query that never returns, or one that crashes (SIGSEGV in
 * nvmlInit, SIGBUS on a library file truncated after it was mapped), whatever it does to its signals,
 * ends this program in bounded time with one line saying where it was: loading the library, in
 * nvmlInit_v2, or reading (which GPU). The child's stdin, stdout and stderr are /dev/null and it holds
 * no other descriptor: what the library prints goes nowhere, and nothing it leaves running (a process
 * it forked, a child stuck in the kernel) keeps the caller's pipe open; what is left of it in its
 * process group is killed at the end. The child hands its transcript, or its error line, over through a
 * shared mapping. A SIGTERM, or the end of the process that started it (asked for as its parent-death
 * signal), ends the run at once with the child and its group: a reader no one waits for is not left to
 * run out its time.
 *
 * Exit status 0: the transcript on stdout. Otherwise one line "gct-nvml-inventory: error: <what>
 * (<where>)" on stderr and nothing on stdout: 1 an error (bad arguments, NVML answered an error, ...);
 * 2 the run outlived TIMEOUT_SECONDS (a driver that never answers); 3 the library crashed or ended
 * the process itself; 4 the library could not be loaded (dlopen failed: for a bare soname, no driver
 * installed). Only status 0 means a transcript, and then a whole one.
 * --help prints the usage, --version (-v) the toolkit's version (exit status 0).
 * Nothing is read from the environment (the launcher starts it with none). It is linked dynamically,
 * unlike the launcher, because it must dlopen.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nvml_abi.h"

#define PROG "gct-nvml-inventory"

/* cdi/nvml_binding.py's and cdi/nvml.py's values, under their names there (a unit test compares them) */
#define SUCCESS 0
#define ERROR_NOT_SUPPORTED 3
#define ERROR_NOT_FOUND 6
#define ERROR_LIBRARY_NOT_FOUND 12
#define ERROR_FUNCTION_NOT_FOUND 13
#define DEVICE_MIG_ENABLE 1
#define GPU_INSTANCE_PROFILE_COUNT 0x12
#define COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED 0
#define SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define DEVICE_NAME_V2_BUFFER_SIZE 96
#define DEVICE_UUID_V2_BUFFER_SIZE 96
#define MAX_MIG_MINORS_BYTES (1 << 20)
#define MAX_NVML_TIMEOUT 3600

/* NVML_STRUCT_VERSION(2): the struct's size with the version in the top byte */
#define GPU_INSTANCE_PROFILE_INFO_V2 ((unsigned int)sizeof(nvmlGpuInstanceProfileInfo_v2_t) | 2u << 24)
#define COMPUTE_INSTANCE_PROFILE_INFO_V2 ((unsigned int)sizeof(nvmlComputeInstanceProfileInfo_v2_t) | 2u << 24)

/* A char array as the binding reads it (ffi.string): up to the first NUL, or all of it; for "%.*s" */
#define TEXT(array) (int)strnlen(array, sizeof(array)), array

/* What the child shares with this program: where it is, and its result (the transcript, or its
 * error line); a mapping, not a descriptor, so that the library sees no descriptor of ours. */
#define SHARED_SIZE (16u << 20)   /* reserved, not used: only the pages written cost memory */
enum stage { LOADING, INITIALISING, READING };
enum result { NOTHING, TRANSCRIPT, ERROR_LINE };   /* set last: a library that exits midway leaves NOTHING */
static const char *const stage_text[] = {
    [LOADING] = "while loading the library (dlopen: its constructors)",
    [INITIALISING] = "in nvmlInit_v2",
    [READING] = "while reading NVML",
};
struct shared {
    volatile int stage;           /* enum stage */
    char where[32];               /* what is being read: "NVML", "GPU 3" */
    volatile int result;          /* what data holds once the child is done: enum result */
    size_t length;                /* of data */
    char data[];
};
#define DATA_SIZE (SHARED_SIZE - sizeof(struct shared))

static struct shared *shared;
static int in_child;          /* the child reports through shared, this program on stderr */
static void *nvml;            /* the loaded library (in the child) */
static const char *missing;   /* the symbol the last NVML_CALL did not find, else NULL */
static char *where = "NVML";  /* shared->where once mapped */

/* Calls NVML function `name`, looked up by name at each call as the binding does; a symbol the library
 * lacks answers ERROR_FUNCTION_NOT_FOUND, as the binding reports it (and falls back on it). */
#define NVML_CALL(name, ...)                                                                               \
    __extension__({                                                                                        \
        __typeof__(name) *fn_ = (__typeof__(name) *)dlsym(nvml, #name);                                    \
        missing = fn_ ? NULL : #name;                                                                      \
        fn_ ? fn_(__VA_ARGS__) : ERROR_FUNCTION_NOT_FOUND;                                                 \
    })

static int write_all(int fd, const char *data, size_t size)
{
    while (size > 0) {
        ssize_t n = write(fd, data, size);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        data += n;
        size -= (size_t)n;
    }
    return 0;
}

/* "PROG: error: <what> (<where>)\n" into line; a control character from the library (dlerror,
 * nvmlErrorString) becomes '?', so the message stays one line */
static size_t error_line(char *line, size_t size, const char *what, const char *at)
{
    int n = snprintf(line, size, PROG ": error: %s (%s)\n", what, at);
    size_t len = n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
    for (size_t i = 0; i + 1 < len; i++)
        if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f)
            line[i] = '?';
    if (len > 0)
        line[len - 1] = '\n';
    return len;
}

/* The error line, on stderr (this program) or in the shared mapping (the child); exits with status */
__attribute__((noreturn, format(printf, 3, 4))) static void fail(int status, const char *at, const char *fmt, ...)
{
    char what[1024], line[2048];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    size_t length = error_line(line, sizeof(line), what, at);
    if (in_child) {
        memcpy(shared->data, line, length);
        shared->length = length;
        shared->result = ERROR_LINE;
    } else {
        write_all(2, line, length);
    }
    _exit(status);
}

/* TIMEOUT_SECONDS in microseconds; 0 when it is not a positive decimal of at most MAX_NVML_TIMEOUT
 * (strtod would also take "inf", hex and leading blanks; digits beyond microseconds do not count) */
static long long timeout_microseconds(const char *text)
{
    long long seconds = 0, fraction = 0, scale = 100000;
    const char *p = text;

    if (*p < '0' || *p > '9')
        return 0;
    for (; *p >= '0' && *p <= '9'; p++)
        if ((seconds = seconds * 10 + (*p - '0')) > MAX_NVML_TIMEOUT)
            return 0;
    if (*p == '.') {
        if (*++p < '0' || *p > '9')
            return 0;
        for (; *p >= '0' && *p <= '9'; p++, scale /= 10)
            fraction += (*p - '0') * scale;
    }
    if (*p != '\0' || seconds * 1000000 + fraction > MAX_NVML_TIMEOUT * 1000000LL)
        return 0;
    return seconds * 1000000 + fraction;
}

/* --- the transcript --------------------------------------------------------------------------------- */

/* A line of the transcript, into the shared mapping */
__attribute__((format(printf, 1, 2))) static void emit(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(shared->data + shared->length, DATA_SIZE - shared->length, fmt, ap);
    va_end(ap);
    if (n < 0)
        fail(1, "transcript", "cannot format a line");
    if ((size_t)n >= DATA_SIZE - shared->length) {
        shared->length = 0;
        fail(1, "transcript", "longer than %u MiB", SHARED_SIZE >> 20);
    }
    shared->length += (size_t)n;
}

/* nvml_binding's error_text: nvmlErrorString's words, or nvml.h's for the codes a library without it gives */
static const char *error_text(int code)
{
    __typeof__(nvmlErrorString) *error_string = (__typeof__(nvmlErrorString) *)dlsym(nvml, "nvmlErrorString");
    const char *text = error_string ? error_string(code) : NULL;
    static char unknown[32];

    if (text != NULL)
        return text;
    if (code == ERROR_LIBRARY_NOT_FOUND)
        return "Shared Library Not Found";
    if (code == ERROR_FUNCTION_NOT_FOUND)
        return "Function Not Found";
    snprintf(unknown, sizeof(unknown), "NVML error %d", code);
    return unknown;
}

/* Any answer but SUCCESS ends the run, as an NvmlCallError cdi/nvml.py does not catch */
static void check(int code)
{
    if (code != SUCCESS)
        fail(1, where, "NVML query failed: %s%s%s", missing ? missing : "", missing ? ": " : "", error_text(code));
}

/* zlib's crc32 (reflected, polynomial 0xEDB88320), as cdi/nvml.py prints it; bit by bit: the file is a
 * few KiB, where a table would be more code than time saved */
static uint32_t crc32(const unsigned char *data, size_t size)
{
    uint32_t crc = 0xFFFFFFFFu;

    for (size_t i = 0; i < size; i++) {
        crc ^= data[i];
        for (int bit = 0; bit < 8; bit++)
            crc = (crc >> 1) ^ (0xEDB88320u & -(crc & 1u));
    }
    return ~crc;
}

/* cdi/nvml.py's _read_mig_minors_file: its first MiB, opened as Python's open() does (links followed) */
static void read_mig_minors(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        emit("mig-minors absent\n");
        return;
    }
    if (fd < 0)
        fail(1, path, "cannot read MIG capability minors: %s", strerror(errno));
    unsigned char *data = malloc(MAX_MIG_MINORS_BYTES);
    if (data == NULL)
        fail(1, path, "out of memory");
    size_t size = 0;
    while (size < MAX_MIG_MINORS_BYTES) {
        ssize_t n = read(fd, data + size, MAX_MIG_MINORS_BYTES - size);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            fail(1, path, "cannot read MIG capability minors: %s", strerror(errno));
        if (n == 0)
            break;
        size += (size_t)n;
    }
    close(fd);
    emit("mig-minors %u %zu\n", crc32(data, size), size);
    free(data);
}

/* nvml_binding's device_gpu_instance_profile_info: the v2 struct; from a driver without the V call
 * (ERROR_FUNCTION_NOT_FOUND), the v1 one with no name */
static int gi_profile_info(nvmlDevice_t device, unsigned int profile, nvmlGpuInstanceProfileInfo_v2_t *info)
{
    memset(info, 0, sizeof(*info));
    info->version = GPU_INSTANCE_PROFILE_INFO_V2;
    int code = NVML_CALL(nvmlDeviceGetGpuInstanceProfileInfoV, device, profile, info);
    if (code != ERROR_FUNCTION_NOT_FOUND)
        return code;
    nvmlGpuInstanceProfileInfo_t old = {0};
    code = NVML_CALL(nvmlDeviceGetGpuInstanceProfileInfo, device, profile, &old);
    memset(info, 0, sizeof(*info));
    info->id = old.id;
    info->sliceCount = old.sliceCount;
    info->memorySizeMB = old.memorySizeMB;
    return code;
}

/* ... and gpu_instance_compute_instance_profile_info, of which only the slices are printed */
static unsigned int ci_profile_slices(nvmlGpuInstance_t gpu_instance, unsigned int profile)
{
    nvmlComputeInstanceProfileInfo_v2_t info = {0};
    info.version = COMPUTE_INSTANCE_PROFILE_INFO_V2;
    int code = NVML_CALL(nvmlGpuInstanceGetComputeInstanceProfileInfoV, gpu_instance, profile,
                         COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &info);
    if (code != ERROR_FUNCTION_NOT_FOUND) {
        check(code);
        return info.sliceCount;
    }
    nvmlComputeInstanceProfileInfo_t old = {0};
    check(NVML_CALL(nvmlGpuInstanceGetComputeInstanceProfileInfo, gpu_instance, profile,
                    COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &old));
    return old.sliceCount;
}

/* cdi/nvml.py's _gi_profiles: an index that is not a profile of this GPU answers some error */
static void read_gi_profiles(nvmlDevice_t device, unsigned int gpu)
{
    for (unsigned int index = 0; index < GPU_INSTANCE_PROFILE_COUNT; index++) {
        nvmlGpuInstanceProfileInfo_v2_t info;
        if (gi_profile_info(device, index, &info) != SUCCESS) {
            emit("gpu %u gi-profile %u none\n", gpu, index);
            continue;
        }
        emit("gpu %u gi-profile %u id %u slices %u memory %llu name %.*s\n", gpu, index, info.id, info.sliceCount,
             info.memorySizeMB, TEXT(info.name));
    }
}

/* cdi/nvml.py's _read_mig_devices */
static void read_mig_devices(nvmlDevice_t device, unsigned int gpu)
{
    unsigned int count = 0;

    read_gi_profiles(device, gpu);
    check(NVML_CALL(nvmlDeviceGetMaxMigDeviceCount, device, &count));
    emit("gpu %u max-mig-devices %u\n", gpu, count);
    for (unsigned int slot = 0; slot < count; slot++) {
        nvmlDevice_t mig = NULL;
        int code = NVML_CALL(nvmlDeviceGetMigDeviceHandleByIndex, device, slot, &mig);
        if (code == ERROR_NOT_FOUND) {   /* an empty slot */
            emit("gpu %u mig %u none\n", gpu, slot);
            continue;
        }
        check(code);
        unsigned int gi = 0, ci = 0;
        check(NVML_CALL(nvmlDeviceGetGpuInstanceId, mig, &gi));
        check(NVML_CALL(nvmlDeviceGetComputeInstanceId, mig, &ci));
        nvmlGpuInstance_t gpu_instance = NULL;
        check(NVML_CALL(nvmlDeviceGetGpuInstanceById, device, gi, &gpu_instance));
        nvmlGpuInstanceInfo_t gi_info = {0};
        check(NVML_CALL(nvmlGpuInstanceGetInfo, gpu_instance, &gi_info));
        nvmlComputeInstance_t compute_instance = NULL;
        check(NVML_CALL(nvmlGpuInstanceGetComputeInstanceById, gpu_instance, ci, &compute_instance));
        nvmlComputeInstanceInfo_t ci_info = {0};
        check(NVML_CALL(nvmlComputeInstanceGetInfo_v2, compute_instance, &ci_info));
        unsigned int ci_slices = ci_profile_slices(gpu_instance, ci_info.profileId);
        char uuid[DEVICE_UUID_V2_BUFFER_SIZE] = "";
        check(NVML_CALL(nvmlDeviceGetUUID, mig, uuid, sizeof(uuid)));
        nvmlMemory_t memory = {0};
        check(NVML_CALL(nvmlDeviceGetMemoryInfo, mig, &memory));
        emit("gpu %u mig %u gi %u ci %u gi-profile-id %u ci-profile-id %u ci-slices %u memory %llu uuid %.*s\n", gpu,
             slot, gi, ci, gi_info.profileId, ci_info.profileId, ci_slices, memory.total, TEXT(uuid));
    }
}

/* cdi/nvml.py's _read_gpu */
static void read_gpu(unsigned int index)
{
    nvmlDevice_t device = NULL;
    unsigned int minor = 0, architecture = 0, mig_mode = 0, pending = 0, brand = 0;
    int major = 0, minor_cc = 0;

    snprintf(where, sizeof(shared->where), "GPU %u", index);
    check(NVML_CALL(nvmlDeviceGetHandleByIndex_v2, index, &device));
    check(NVML_CALL(nvmlDeviceGetMinorNumber, device, &minor));
    emit("gpu %u minor %u\n", index, minor);
    check(NVML_CALL(nvmlDeviceGetCudaComputeCapability, device, &major, &minor_cc));
    emit("gpu %u compute-capability %d %d\n", index, major, minor_cc);
    int code = NVML_CALL(nvmlDeviceGetArchitecture, device, &architecture);
    if (code == ERROR_NOT_SUPPORTED)
        emit("gpu %u architecture not-supported\n", index);
    else {
        check(code);
        emit("gpu %u architecture %u\n", index, architecture);
    }
    code = NVML_CALL(nvmlDeviceGetMigMode, device, &mig_mode, &pending);
    if (code == ERROR_NOT_SUPPORTED)
        emit("gpu %u mig-mode not-supported\n", index);
    else {
        check(code);
        emit("gpu %u mig-mode %u\n", index, mig_mode);
        if (mig_mode == DEVICE_MIG_ENABLE)
            read_mig_devices(device, index);
    }
    char uuid[DEVICE_UUID_V2_BUFFER_SIZE] = "", name[DEVICE_NAME_V2_BUFFER_SIZE] = "";
    nvmlPciInfo_t pci = {0};
    nvmlMemory_t memory = {0};
    check(NVML_CALL(nvmlDeviceGetUUID, device, uuid, sizeof(uuid)));
    check(NVML_CALL(nvmlDeviceGetName, device, name, sizeof(name)));
    check(NVML_CALL(nvmlDeviceGetBrand, device, &brand));
    check(NVML_CALL(nvmlDeviceGetPciInfo_v3, device, &pci));
    check(NVML_CALL(nvmlDeviceGetMemoryInfo, device, &memory));
    emit("gpu %u uuid %.*s\n", index, TEXT(uuid));
    emit("gpu %u name %.*s\n", index, TEXT(name));
    emit("gpu %u brand %u\n", index, brand);
    emit("gpu %u pci-bus-id %.*s\n", index, TEXT(pci.busId));
    emit("gpu %u memory %llu\n", index, memory.total);
}

/* As cdi/nvml.py's check_library: a FIFO in the library's place would block dlopen until the timeout.
 * (Its ELF check is not repeated: a truncated library is a SIGBUS in the child, reported as a crash.) */
static void check_library_file(const char *library)
{
    if (strchr(library, '/') == NULL)
        return;   /* a soname, for the loader to search */
    struct stat st;
    int fd = open(library, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        fail(1, library, "cannot open the NVML library: %s", strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        fail(1, library, "the NVML library is not a regular file");
    close(fd);
}

/* cdi/nvml.py's _initialise, for one library path or soname (in the child) */
static void load(const char *library)
{
    shared->stage = LOADING;
    nvml = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (nvml == NULL)
        fail(4, library, "cannot load the NVML library: %s", dlerror());
    shared->stage = INITIALISING;
    int code = NVML_CALL(nvmlInit_v2);
    if (code != SUCCESS)
        fail(1, library, "NVML initialisation failed: %s%s%s", missing ? missing : "", missing ? ": " : "",
             error_text(code));
    shared->stage = READING;
}

/* cdi/nvml.py's _read_inventory */
static void read_inventory(const char *mig_minors)
{
    char version[SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = "";
    int cuda_version = 0;
    unsigned int count = 0;

    check(NVML_CALL(nvmlSystemGetDriverVersion, version, sizeof(version)));
    check(NVML_CALL(nvmlSystemGetCudaDriverVersion, &cuda_version));
    emit("driver-version %.*s\n", TEXT(version));
    emit("cuda-driver-version %d\n", cuda_version);
    read_mig_minors(mig_minors);
    check(NVML_CALL(nvmlDeviceGetCount_v2, &count));
    emit("device-count %u\n", count);
    for (unsigned int index = 0; index < count; index++)
        read_gpu(index);
}

/* --- the child, and this program waiting for it -------------------------------------------------------- */

/* The child: stdio on /dev/null (devnull, closed here), no other descriptor; the caller's signal mask
 * back. Loads the library, reads, and leaves the transcript in the shared mapping. */
static pid_t parent;   /* this program, as its child checks it is still there */

__attribute__((noreturn)) static void child(const char *library, const char *mig_minors, int devnull,
                                            const sigset_t *mask)
{
    in_child = 1;
    setpgid(0, 0);   /* a group of its own, for whatever the library starts: ended with it */
    /* this program gone (killed outright): a library left hanging here would outlive every caller */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(1);
    for (int fd = 0; fd < 3; fd++)
        if (dup2(devnull, fd) < 0)
            fail(1, "/dev/null", "cannot redirect the library's stdio: %s", strerror(errno));
    close(devnull);
    sigprocmask(SIG_SETMASK, mask, NULL);
    load(library);
    read_inventory(mig_minors);
    shared->result = TRANSCRIPT;
    /* _exit: the library's destructors (no nvmlShutdown was called, as in Python) are not worth a hang */
    _exit(0);
}

static const char *signal_name(int signo)
{
    static char other[32];
    switch (signo) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS: the library file is shorter than its mapping, truncated or replaced while in use";
    case SIGILL: return "SIGILL";
    case SIGFPE: return "SIGFPE";
    case SIGABRT: return "SIGABRT";
    case SIGTRAP: return "SIGTRAP";
    case SIGSYS: return "SIGSYS";
    case SIGKILL: return "SIGKILL";
    }
    snprintf(other, sizeof(other), "signal %d", signo);
    return other;
}

/* Where the child was, for a message: "while loading the library (...)", "in nvmlInit_v2", "while
 * reading NVML (GPU 1)" */
static const char *child_stage(void)
{
    static char text[128];
    int stage = shared->stage;
    if (stage < LOADING || stage > READING)
        stage = LOADING;
    char gpu[sizeof(shared->where)];
    memcpy(gpu, shared->where, sizeof(gpu));
    gpu[sizeof(gpu) - 1] = '\0';
    if (stage == READING)
        snprintf(text, sizeof(text), "%s (%s)", stage_text[stage], gpu);
    else
        snprintf(text, sizeof(text), "%s", stage_text[stage]);
    return text;
}

/* Waits for the child until the deadline (SIGCHLD and SIGTERM blocked: sigtimedwait); its wait status, -1
 * when the time is up, -2 on a SIGTERM. */
static int wait_until(pid_t pid, const struct timespec *deadline)
{
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigaddset(&chld, SIGTERM);
    for (;;) {
        int status;
        pid_t waited = waitpid(pid, &status, WNOHANG);
        if (waited == pid)
            return status;
        if (waited < 0 && errno != EINTR)
            fail(1, "waitpid", "cannot wait for the NVML reader: %s", strerror(errno));
        struct timespec now, left;
        clock_gettime(CLOCK_MONOTONIC, &now);
        left.tv_sec = deadline->tv_sec - now.tv_sec;
        left.tv_nsec = deadline->tv_nsec - now.tv_nsec;
        if (left.tv_nsec < 0) {
            left.tv_nsec += 1000000000L;
            left.tv_sec--;
        }
        if (left.tv_sec < 0)
            return -1;
        /* SIGCHLD, the time up (EAGAIN) or EINTR: look again; SIGTERM: stopped (the caller is gone) */
        if (sigtimedwait(&chld, NULL, &left) == SIGTERM)
            return -2;
    }
}

/* The toolkit's version, given by install_launchers (-DGCT_TOOLKIT_VERSION=...); a bare compile says so. */
#ifndef GCT_TOOLKIT_VERSION
#define GCT_TOOLKIT_VERSION "unknown"
#endif

static const char usage[] =
    "usage: " PROG " LIBRARY MIG_MINORS TIMEOUT_SECONDS\n"
    "\n"
    "An internal helper of gpu-container-toolkit, run by its programs (not by people): prints the NVML\n"
    "answers a GPU inventory is made of, read in a child process, so that a driver library that hangs\n"
    "or crashes ends in one error line within TIMEOUT_SECONDS.\n"
    "\n"
    "  LIBRARY          libnvidia-ml's absolute path, or a bare soname for the loader to search\n"
    "  MIG_MINORS       the driver's proc driver/nvidia-caps/mig-minors file\n"
    "  TIMEOUT_SECONDS  above 0, at most 3600\n"
    "\n"
    "Exit status 0: the answers on stdout; 1 error, 2 timeout, 3 the library crashed, 4 it could not\n"
    "be loaded (one line on stderr). --help this text, --version (-v) the version.\n";

int main(int argc, char **argv)
{
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(usage, stdout);
        return 0;
    }
    if (argc == 2 && (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-v") == 0)) {
        printf("%s (gpu-container-toolkit) %s\n", PROG, GCT_TOOLKIT_VERSION);
        return 0;
    }
    if (argc != 4)
        fail(1, "command line", "expected LIBRARY MIG_MINORS TIMEOUT_SECONDS (see --help), got %d arguments", argc - 1);
    /* what the caller left open beyond stdio (a container's descriptors, handed to runc) is not the
     * driver library's to see; a kernel without close_range (before 5.9) keeps them, as Python would */
    close_range(3, ~0U, 0);
    const char *library = argv[1], *timeout = argv[3];
    if (library[0] == '\0' || (library[0] != '/' && strchr(library, '/') != NULL))
        fail(1, "LIBRARY", "not an absolute path nor a bare soname: '%s'", library);
    long long microseconds = timeout_microseconds(timeout);
    if (microseconds == 0)
        fail(1, "TIMEOUT_SECONDS", "not a number of seconds above 0 and at most %d: '%s'", MAX_NVML_TIMEOUT, timeout);
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += (time_t)(microseconds / 1000000);
    deadline.tv_nsec += (long)(microseconds % 1000000) * 1000;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_nsec -= 1000000000L;
        deadline.tv_sec++;
    }
    check_library_file(library);

    shared = mmap(NULL, SHARED_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (shared == MAP_FAILED)
        fail(1, "mmap", "cannot map memory for the NVML reader: %s", strerror(errno));
    strcpy(shared->where, "NVML");
    where = shared->where;
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull < 0)
        fail(1, "/dev/null", "cannot open: %s", strerror(errno));
    /* SIGCHLD: delivered (not ignored, whatever the caller left) and blocked, for sigtimedwait; SIGTERM
     * too, and asked for when the caller ends (the device plugin stopped while a driver that hangs was
     * being read, a runtime shim killed): the child and its group are then ended at once, not at the
     * deadline, and nothing of a run no one waits for is left behind */
    sigset_t chld, mask;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigaddset(&chld, SIGTERM);
    signal(SIGCHLD, SIG_DFL);
    if (sigprocmask(SIG_BLOCK, &chld, &mask) != 0)
        fail(1, "sigprocmask", "cannot block SIGCHLD: %s", strerror(errno));
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0)
        fail(1, "prctl", "cannot ask to hear of the caller's end: %s", strerror(errno));
    parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        fail(1, "fork", "cannot start the NVML reader: %s", strerror(errno));
    if (pid == 0)
        child(library, argv[2], devnull, &mask);
    close(devnull);

    setpgid(pid, pid);   /* as the child does, whichever runs first */
    int status = wait_until(pid, &deadline);
    /* the child, when it hangs, and anything of the library's still running in its group: not waited
     * for (a process stuck in the driver may not even die) */
    kill(-pid, SIGKILL);
    if (status == -2)
        fail(1, library, "stopped by SIGTERM %s (its caller ended or asked it to stop)", child_stage());
    if (status == -1) {
        char seconds[64];     /* "60.000000" (as Python writes it) said as "60" */
        snprintf(seconds, sizeof(seconds), "%s", timeout);
        if (strchr(seconds, '.') != NULL) {
            size_t end = strlen(seconds);
            while (seconds[end - 1] == '0')
                seconds[--end] = '\0';
            if (seconds[end - 1] == '.')
                seconds[end - 1] = '\0';
        }
        fail(2, library, "NVML did not answer in %s s %s: the driver or its library hangs; check the driver, "
             "or allow longer with NVIDIA_CTK_NVML_TIMEOUT", seconds, child_stage());
    }
    if (WIFSIGNALED(status))
        fail(3, library, "the NVML library crashed (%s) %s", signal_name(WTERMSIG(status)), child_stage());
    int code = WEXITSTATUS(status);
    size_t length = shared->length < DATA_SIZE ? shared->length : DATA_SIZE;
    if (code == 0 && shared->result == TRANSCRIPT) {
        if (write_all(1, shared->data, length) != 0)
            fail(1, "stdout", "cannot write the transcript: %s", strerror(errno));
        _exit(0);
    }
    if ((code == 1 || code == 4) && shared->result == ERROR_LINE) {
        write_all(2, shared->data, length);   /* the child's error line */
        _exit(code);
    }
    fail(3, library, "the NVML library ended the process (exit status %d) %s", code, child_stage());
}
