/* Shared between the parts of the simulated NVML: the handle tables and their checks. */
#ifndef NVML_SIM_INTERNAL_H
#define NVML_SIM_INTERNAL_H

#include "nvml_api.h"
#include "sim_inventory.h"

#define SIM_MAX_GPUS 16
#define SIM_MAX_MIGS 7
#define SIM_HANDLE_MAGIC 0x4e564d4cU /* "NVML" */

/* The host's state, relative to its root (simulator/host_state.py writes it): the XID event log, one
 * line per event, one file per lost GPU, named by its UUID, and one file per GPU whose compute mode is
 * not DEFAULT, named by its UUID, holding the mode's number. */
#define SIM_STATE_DIR "run/nvidia-simulated-host"
#define SIM_EVENTS_FILE "events"
#define SIM_LOST_DIR "lost"
#define SIM_COMPUTE_MODE_DIR "compute_mode"

/* A device handle is either a visible GPU or a visible MIG device of one. */
struct nvmlDevice_st {
    unsigned int magic;
    const struct sim_gpu *gpu;
    const struct sim_mig *mig;      /* NULL for a full GPU */
    unsigned int index;             /* GPU: NVML index; MIG: index within its parent */
    struct nvmlDevice_st *parent;   /* MIG: the parent GPU's handle */
    struct nvmlGpuInstance_st *gi;  /* MIG: its GPU instance */
};

struct nvmlGpuInstance_st {
    unsigned int magic;
    struct nvmlDevice_st *mig_device;
    struct nvmlComputeInstance_st *ci;
};

struct nvmlComputeInstance_st {
    unsigned int magic;
    struct nvmlGpuInstance_st *gi;
};

/* NVML_SUCCESS when NVML is initialised, NVML_ERROR_UNINITIALIZED otherwise. */
nvmlReturn_t sim_check_initialized(void);

/* Validate a handle from the caller: NULL, foreign or stale pointers are INVALID_ARGUMENT. */
struct nvmlDevice_st *sim_device(nvmlDevice_t handle);
struct nvmlGpuInstance_st *sim_gpu_instance(nvmlGpuInstance_t handle);
struct nvmlComputeInstance_st *sim_compute_instance(nvmlComputeInstance_t handle);

/* The visible MIG devices of a visible GPU, in index order. */
unsigned int sim_mig_count(const struct nvmlDevice_st *gpu);
struct nvmlDevice_st *sim_mig_device(const struct nvmlDevice_st *gpu, unsigned int index);

/* NVML_ERROR_GPU_IS_LOST while the device's GPU is lost (`nvidia-ctk simulate xid` with XID 79, until
 * `simulate reset`), else NVML_SUCCESS. */
nvmlReturn_t sim_device_answers(const struct nvmlDevice_st *dev);

/* The simulated host's state directory (<root>/run/nvidia-simulated-host: the event log and the lost
 * GPUs); "" when the library is not loaded from a simulated host's driver root (in a container). */
const char *sim_state_dir(void);

/* A GPU's PCI info as nvmlDeviceGetPciInfo_v3 fills it. */
void sim_fill_pci_info(const struct sim_gpu *gpu, nvmlPciInfo_t *pci);

/* Copy a string into a caller's buffer of `length` bytes, NVML style. */
nvmlReturn_t sim_copy_string(char *out, unsigned int length, const char *value);

#endif
