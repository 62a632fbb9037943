/* Shared between the parts of the simulated NVML: the handle tables and their checks. */
#ifndef NVML_SIM_INTERNAL_H
#define NVML_SIM_INTERNAL_H

#include "nvml_api.h"
#include "sim_inventory.h"

#define SIM_MAX_GPUS 16
#define SIM_MAX_MIGS 7
#define SIM_HANDLE_MAGIC 0x4e564d4cU /* "NVML" */

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

/* Copy a string into a caller's buffer of `length` bytes, NVML style. */
nvmlReturn_t sim_copy_string(char *out, unsigned int length, const char *value);

#endif
