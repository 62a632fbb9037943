/* The simulated libnvidia-ml.so.1: events (nvmlEventSetCreate, nvmlDeviceRegisterEvents,
 * nvmlEventSetWait_v2, nvmlEventSetFree, nvmlDeviceGetSupportedEventTypes).
 *
 * `nvidia-ctk simulate xid` appends one line per event to <state>/events (simulator/host_state.py):
 *     <eventType> <eventData> <GPU UUID> <gpuInstanceId> <computeInstanceId>
 * The log is the queue, shared by every process (and mount namespace) that loads the host's library.
 * An event set reads it from where it was when a device was registered; a waiting set sleeps in
 * poll() on an inotify watch of the state directory, so an event written by another process wakes it
 * at once, and the timeout is the caller's. A library that is not in a simulated host's driver root
 * (in a container) has no log: its sets only time out. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nvml_internal.h"

#define SIM_MAX_EVENT_SETS 64
#define SUPPORTED_EVENTS (nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError | nvmlEventTypePState | \
                          nvmlEventTypeXidCriticalError | nvmlEventTypeClock)
#define LINE_MAX_BYTES 256

struct registration {
    const struct nvmlDevice_st *device;
    unsigned long long types;
    off_t from;                      /* events before this offset of the log happened before registering */
};

struct nvmlEventSet_st {
    unsigned int magic;
    int in_use;
    int watch_fd;                    /* inotify on the state directory; -1 without one */
    off_t offset;                    /* the next line of the log to read */
    unsigned int count;
    struct registration regs[SIM_MAX_GPUS];
};

static struct nvmlEventSet_st sets[SIM_MAX_EVENT_SETS];
static pthread_mutex_t sets_lock = PTHREAD_MUTEX_INITIALIZER;

static void events_path(char *out, size_t size)
{
    snprintf(out, size, "%s/" SIM_EVENTS_FILE, sim_state_dir());
}

static off_t log_end(void)
{
    char path[PATH_MAX + 32];
    struct stat st;
    if (!sim_state_dir()[0])
        return 0;
    events_path(path, sizeof(path));
    return stat(path, &st) == 0 ? st.st_size : 0;
}

static struct nvmlEventSet_st *event_set(nvmlEventSet_t set)
{
    uintptr_t p = (uintptr_t)set, base = (uintptr_t)sets;
    if (!set || p < base || p >= base + sizeof(sets) || (p - base) % sizeof(sets[0]) != 0)
        return NULL;
    return set->magic == SIM_HANDLE_MAGIC && set->in_use ? set : NULL;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t handle, unsigned long long *eventTypes)
{
    nvmlReturn_t ret = sim_check_initialized();
    if (ret != NVML_SUCCESS)
        return ret;
    struct nvmlDevice_st *dev = sim_device(handle);
    if (!dev || !eventTypes)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((ret = sim_device_answers(dev)) != NVML_SUCCESS)
        return ret;
    if (dev->mig)
        return NVML_ERROR_NOT_SUPPORTED; /* events are registered on the whole GPU */
    *eventTypes = SUPPORTED_EVENTS;
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    nvmlReturn_t ret = sim_check_initialized();
    if (ret != NVML_SUCCESS)
        return ret;
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&sets_lock);
    struct nvmlEventSet_st *s = NULL;
    for (unsigned int i = 0; i < SIM_MAX_EVENT_SETS && !s; i++)
        if (!sets[i].in_use)
            s = &sets[i];
    if (s) {
        memset(s, 0, sizeof(*s));
        s->magic = SIM_HANDLE_MAGIC;
        s->in_use = 1;
        s->watch_fd = -1;
        if (sim_state_dir()[0]) {
            s->watch_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
            if (s->watch_fd >= 0 &&
                inotify_add_watch(s->watch_fd, sim_state_dir(), IN_MODIFY | IN_CREATE | IN_MOVED_TO) < 0) {
                close(s->watch_fd);
                s->watch_fd = -1; /* waits then sleep in short steps instead */
            }
        }
        s->offset = log_end();
    }
    pthread_mutex_unlock(&sets_lock);
    if (!s)
        return NVML_ERROR_MEMORY;
    *set = s;
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t handle, unsigned long long eventTypes,
                                                    nvmlEventSet_t set)
{
    nvmlReturn_t ret = sim_check_initialized();
    if (ret != NVML_SUCCESS)
        return ret;
    struct nvmlDevice_st *dev = sim_device(handle);
    struct nvmlEventSet_st *s = event_set(set);
    if (!dev || !s)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((ret = sim_device_answers(dev)) != NVML_SUCCESS)
        return ret;
    if (dev->mig || (eventTypes & ~(unsigned long long)SUPPORTED_EVENTS))
        return NVML_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&sets_lock);
    unsigned int i = 0;
    while (i < s->count && s->regs[i].device != dev)
        i++;
    if (i == s->count) {
        s->regs[s->count++] = (struct registration){dev, 0, log_end()};
    }
    s->regs[i].types |= eventTypes;
    pthread_mutex_unlock(&sets_lock);
    return NVML_SUCCESS;
}

/* One line of the log: the event it describes, if a registration of s takes it. */
static int take_line(const struct nvmlEventSet_st *s, const char *line, off_t at, nvmlEventData_t *data)
{
    unsigned long long type, value;
    unsigned int gi, ci;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    if (sscanf(line, "%llu %llu %95s %u %u", &type, &value, uuid, &gi, &ci) != 5)
        return 0;
    for (unsigned int i = 0; i < s->count; i++) {
        const struct registration *r = &s->regs[i];
        if (at < r->from || !(r->types & type) || strcasecmp(r->device->gpu->uuid, uuid) != 0)
            continue;
        data->device = (nvmlDevice_t)r->device;
        data->eventType = type;
        data->eventData = value;
        data->gpuInstanceId = gi;
        data->computeInstanceId = ci;
        return 1;
    }
    return 0;
}

/* Reads the complete lines after s->offset up to the first event s takes (1, data filled). */
static int next_event(struct nvmlEventSet_st *s, nvmlEventData_t *data)
{
    char path[PATH_MAX + 32], buffer[4096];
    if (!sim_state_dir()[0])
        return 0;
    events_path(path, sizeof(path));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int found = 0;
    for (;;) {
        ssize_t n = pread(fd, buffer, sizeof(buffer) - 1, s->offset);
        if (n <= 0)
            break;
        buffer[n] = '\0';
        char *line = buffer, *end;
        while (!found && (end = memchr(line, '\n', (size_t)(buffer + n - line)))) {
            *end = '\0';
            off_t at = s->offset;
            s->offset += end - line + 1;
            found = take_line(s, line, at, data);
            line = end + 1;
        }
        if (found)
            break;
        if (line == buffer) { /* a line longer than the buffer is no event of ours: skip it */
            if (n < (ssize_t)sizeof(buffer) - 1)
                break;      /* an incomplete last line: its writer is not done yet */
            s->offset += n;
        }
    }
    close(fd);
    return found;
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Blocks until an event of a registered type happens on a registered device or timeoutms pass
 * (NVML_ERROR_TIMEOUT), as the real call does. */
NVMLSIM_EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    nvmlReturn_t ret = sim_check_initialized();
    if (ret != NVML_SUCCESS)
        return ret;
    struct nvmlEventSet_st *s = event_set(set);
    if (!s || !data)
        return NVML_ERROR_INVALID_ARGUMENT;
    long long deadline = now_ms() + timeoutms;
    for (;;) {
        pthread_mutex_lock(&sets_lock);
        int found = next_event(s, data);
        int watch_fd = s->watch_fd;
        pthread_mutex_unlock(&sets_lock);
        if (found)
            return NVML_SUCCESS;
        long long left = deadline - now_ms();
        if (left <= 0)
            return NVML_ERROR_TIMEOUT;
        if (watch_fd < 0) {
            poll(NULL, 0, left < 20 ? (int)left : 20);
            continue;
        }
        struct pollfd pfd = {watch_fd, POLLIN, 0};
        if (poll(&pfd, 1, left > INT_MAX ? INT_MAX : (int)left) > 0) {
            char drain[4096];
            while (read(watch_fd, drain, sizeof(drain)) > 0)
                ;
        }
    }
}

NVMLSIM_EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    return nvmlEventSetWait_v2(set, data, timeoutms);
}

NVMLSIM_EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    nvmlReturn_t ret = sim_check_initialized();
    if (ret != NVML_SUCCESS)
        return ret;
    pthread_mutex_lock(&sets_lock);
    struct nvmlEventSet_st *s = event_set(set);
    if (s) {
        if (s->watch_fd >= 0)
            close(s->watch_fd);
        memset(s, 0, sizeof(*s));
    }
    pthread_mutex_unlock(&sets_lock);
    return s ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}
