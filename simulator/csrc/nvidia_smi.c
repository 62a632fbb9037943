/* nvidia-smi of the simulated host: `-L`, the default summary table, `-q`, `--query-gpu`, `--version`,
 * `-c MODE` (set the compute mode), each for the GPUs `-i ID` picks (an index, UUID or PCI bus id).
 *
 * Everything it shows comes through the NVML calls of the simulated library, compiled into this
 * binary (it is linked statically so that it runs in any container rootfs, busybox ones included;
 * the real tool needs the image's glibc). Exit codes follow the real tool: 0, 2 for bad arguments,
 * 4 when the caller may not set a compute mode, 6 when no GPU is visible (or none has the ID of -i),
 * 9 when the driver cannot be reached. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "nvml_api.h"

/* The public API, declared here as a client would see it in nvml.h. */
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlShutdown(void);
const char *nvmlErrorString(nvmlReturn_t);
nvmlReturn_t nvmlSystemGetDriverVersion(char *, unsigned int);
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int, nvmlDevice_t *);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t, char *, unsigned int);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t, char *, unsigned int);
nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t, char *, unsigned int);
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t, nvmlPciInfo_t *);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t *);
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t, unsigned int *);
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t, int *, int *);
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t, unsigned int *, unsigned int *);
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t, unsigned int *);
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t, unsigned int, nvmlDevice_t *);
nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t, unsigned int *);
nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t, unsigned int *);
nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t, nvmlDeviceAttributes_t *);
nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t, nvmlBrandType_t *);
nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t, nvmlDeviceArchitecture_t *);
nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t, nvmlComputeMode_t *);
nvmlReturn_t nvmlDeviceSetComputeMode(nvmlDevice_t, nvmlComputeMode_t);

#define WIDTH 89 /* between the outer bars of the table */

static int cuda_version(char *out, size_t size)
{
    int v = 0;
    nvmlSystemGetCudaDriverVersion(&v);
    return snprintf(out, size, "%d.%d", v / 1000, (v % 1000) / 10);
}

static void rule(char fill, const int *cells, int n)
{
    putchar(fill == '=' ? '|' : '+');
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < cells[i]; k++)
            putchar(fill);
        putchar(i == n - 1 ? (fill == '=' ? '|' : '+') : (fill == '=' ? '+' : '+'));
    }
    putchar('\n');
}

static void full_line(const char *text)
{
    printf("|%-*s|\n", WIDTH, text);
}

/* The MIG profile of a MIG device handle: its name minus the parent's "<model> MIG " prefix. */
static const char *mig_profile(nvmlDevice_t mig, char *buf, unsigned int size)
{
    if (nvmlDeviceGetName(mig, buf, size) != NVML_SUCCESS)
        return "unknown";
    char *p = strstr(buf, " MIG ");
    return p ? p + 5 : buf;
}

/* The handle of GPU i; a GPU NVML cannot reach (lost: `nvidia-ctk simulate xid` 79) is one line, as the
 * real tool prints it, and is left out of the output. */
static int gpu_handle(unsigned int i, nvmlDevice_t *gpu)
{
    nvmlReturn_t ret = nvmlDeviceGetHandleByIndex_v2(i, gpu);
    if (ret == NVML_SUCCESS)
        return 1;
    printf("Unable to determine the device handle for GPU %u: %s\n", i, nvmlErrorString(ret));
    return 0;
}

static const char *only_id; /* -i: the one GPU to show or change, NULL for all */

/* GPU i is the one -i names (its index, UUID or PCI bus id), or there is no -i. */
static int selected(unsigned int i, nvmlDevice_t gpu)
{
    if (!only_id)
        return 1;
    char text[96];
    nvmlPciInfo_t pci;
    snprintf(text, sizeof(text), "%u", i);
    if (!strcmp(only_id, text))
        return 1;
    if (nvmlDeviceGetUUID(gpu, text, sizeof(text)) == NVML_SUCCESS && !strcmp(only_id, text))
        return 1;
    return nvmlDeviceGetPciInfo_v3(gpu, &pci) == NVML_SUCCESS && !strcasecmp(only_id, pci.busId);
}

/* The GPU's compute mode as -q and --query-gpu spell it (short: the summary table's column). */
static const char *compute_mode_name(nvmlDevice_t gpu, int short_form)
{
    nvmlComputeMode_t mode;
    if (nvmlDeviceGetComputeMode(gpu, &mode) != NVML_SUCCESS)
        return "N/A";
    switch (mode) {
    case NVML_COMPUTEMODE_DEFAULT: return "Default";
    case NVML_COMPUTEMODE_EXCLUSIVE_PROCESS: return short_form ? "E. Process" : "Exclusive_Process";
    case NVML_COMPUTEMODE_PROHIBITED: return "Prohibited";
    }
    return "N/A";
}

static unsigned int mig_devices(nvmlDevice_t gpu, nvmlDevice_t *out)
{
    unsigned int current = 0, pending = 0, max = 0, n = 0;
    if (nvmlDeviceGetMigMode(gpu, &current, &pending) != NVML_SUCCESS || current != NVML_DEVICE_MIG_ENABLE)
        return 0;
    nvmlDeviceGetMaxMigDeviceCount(gpu, &max);
    for (unsigned int i = 0; i < max; i++)
        if (nvmlDeviceGetMigDeviceHandleByIndex(gpu, i, &out[n]) == NVML_SUCCESS)
            n++;
    return n;
}

static int list_gpus(unsigned int count)
{
    char name[96], uuid[96], profile[96];
    for (unsigned int i = 0; i < count; i++) {
        nvmlDevice_t gpu, migs[8];
        if (!gpu_handle(i, &gpu) || !selected(i, gpu))
            continue;
        nvmlDeviceGetName(gpu, name, sizeof(name));
        nvmlDeviceGetUUID(gpu, uuid, sizeof(uuid));
        printf("GPU %u: %s (UUID: %s)\n", i, name, uuid);
        unsigned int n = mig_devices(gpu, migs);
        for (unsigned int m = 0; m < n; m++) {
            nvmlDeviceGetUUID(migs[m], uuid, sizeof(uuid));
            printf("  MIG %-11s Device %2u: (UUID: %s)\n", mig_profile(migs[m], profile, sizeof(profile)), m, uuid);
        }
    }
    return 0;
}

static void gpu_rows(unsigned int count)
{
    static const int cells[] = {41, 24, 22};
    for (unsigned int i = 0; i < count; i++) {
        nvmlDevice_t gpu;
        char name[96], mem[64], power[32];
        nvmlPciInfo_t pci;
        nvmlMemory_t memory;
        unsigned int current = 0, pending = 0;
        if (!gpu_handle(i, &gpu) || !selected(i, gpu))
            continue;
        nvmlDeviceGetName(gpu, name, sizeof(name));
        nvmlDeviceGetPciInfo_v3(gpu, &pci);
        nvmlDeviceGetMemoryInfo(gpu, &memory);
        int mig_capable = nvmlDeviceGetMigMode(gpu, &current, &pending) == NVML_SUCCESS;
        snprintf(mem, sizeof(mem), "%lluMiB / %6lluMiB", memory.used >> 20, memory.total >> 20);
        snprintf(power, sizeof(power), "%3uW / %4uW", 50 + i % 10, 400);
        printf("|%4u  %-29.29s%4s  |%19s %3s |%21s |\n", i, name, "On", pci.busId, "Off", "0");
        printf("| N/A   %2uC    P0%24s |%23s |%7d%%%13s |\n", 30 + i % 7, power, mem, 0, compute_mode_name(gpu, 1));
        printf("|%41s|%24s|%21s |\n", "", "", mig_capable ? (current ? "Enabled" : "Disabled") : "N/A");
        rule('-', cells, 3);
    }
}

static void mig_rows(unsigned int count)
{
    static const int cells[] = {18, 34, 11, 23};
    int any = 0;
    for (unsigned int i = 0; i < count; i++) {
        nvmlDevice_t gpu, migs[8];
        if (!gpu_handle(i, &gpu) || !selected(i, gpu))
            continue;
        unsigned int n = mig_devices(gpu, migs);
        for (unsigned int m = 0; m < n; m++) {
            if (!any) {
                printf("\n+%s+\n", "-----------------------------------------------------------------------------------------");
                full_line(" MIG devices:");
                rule('-', cells, 4);
                printf("| GPU  GI  CI  MIG |                     Memory-Usage |        Vol|        Shared         |\n");
                printf("|      ID  ID  Dev |                       BAR1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |\n");
                printf("|                  |                                  |        ECC|                       |\n");
                rule('=', cells, 4);
                any = 1;
            }
            unsigned int gi = 0, ci = 0;
            nvmlDeviceAttributes_t a = {0};
            nvmlMemory_t memory = {0};
            char mem[64];
            nvmlDeviceGetGpuInstanceId(migs[m], &gi);
            nvmlDeviceGetComputeInstanceId(migs[m], &ci);
            nvmlDeviceGetAttributes_v2(migs[m], &a);
            nvmlDeviceGetMemoryInfo(migs[m], &memory);
            snprintf(mem, sizeof(mem), "%lluMiB / %lluMiB", memory.used >> 20, memory.total >> 20);
            printf("|%3u  %3u %3u %3u  |%32s  | %-6u %2d | %2u %3u  %3u  %3u  %3u |\n", i, gi, ci, m, mem,
                   a.multiprocessorCount, 0, a.sharedCopyEngineCount, a.sharedEncoderCount,
                   a.sharedDecoderCount, a.sharedOfaCount, a.sharedJpegCount);
            printf("|%18s|%32s  |%11s|%23s|\n", "", "0MiB / 32767MiB", "", "");
            rule('-', cells, 4);
        }
    }
}

static int summary(unsigned int count)
{
    static const int cells[] = {41, 24, 22};
    char driver[96], cuda[32], text[320];
    time_t now = time(NULL);
    nvmlSystemGetDriverVersion(driver, sizeof(driver));
    cuda_version(cuda, sizeof(cuda));

    printf("%.24s       \n", ctime(&now));
    printf("+%s+\n", "-----------------------------------------------------------------------------------------");
    snprintf(text, sizeof(text), " NVIDIA-SMI %-22s Driver Version: %-14s CUDA Version: %-9s", driver, driver, cuda);
    full_line(text);
    rule('-', cells, 3);
    printf("| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n");
    printf("| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |\n");
    printf("|                                         |                        |               MIG M. |\n");
    rule('=', cells, 3);
    gpu_rows(count);
    mig_rows(count);
    printf("\n+%s+\n", "-----------------------------------------------------------------------------------------");
    full_line(" Processes:");
    full_line("  GPU   GI   CI        PID   Type   Process name                              GPU Memory");
    full_line("        ID   ID                                                               Usage");
    printf("|%s|\n", "=========================================================================================");
    full_line("  No running processes found");
    printf("+%s+\n", "-----------------------------------------------------------------------------------------");
    return 0;
}

/* One "key : value" line of `-q`, the colon in column 43 as in the real tool. */
static void kv(int indent, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void kv(int indent, const char *key, const char *fmt, ...)
{
    char value[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(value, sizeof(value), fmt, ap);
    va_end(ap);
    printf("%*s%-*s: %s\n", indent, "", 42 - indent, key, value);
}

static const char *brand_name(nvmlBrandType_t brand)
{
    static const char *names[] = {"Unknown", "Quadro", "Tesla", "NVS", "Grid", "GeForce", "Titan",
                                  "NVIDIA Virtual Applications", "NVIDIA Virtual PC", "NVIDIA Virtual Compute Server",
                                  "NVIDIA RTX Virtual Workstation", "NVIDIA Cloud Gaming", "Quadro RTX",
                                  "NVIDIA RTX", "NVIDIA"};
    return brand < sizeof(names) / sizeof(names[0]) ? names[brand] : "Unknown";
}

static const char *architecture_name(nvmlDeviceArchitecture_t arch)
{
    static const char *names[] = {"Unknown", "Unknown", "Kepler", "Maxwell", "Pascal", "Volta", "Turing",
                                  "Ampere", "Ada Lovelace", "Hopper", "Blackwell"};
    return arch < sizeof(names) / sizeof(names[0]) ? names[arch] : "Unknown";
}

/* `-q`: the parts of the real report that scripts grep for. */
static int report(unsigned int count)
{
    char driver[96], cuda[32], text[128];
    time_t now = time(NULL);
    nvmlSystemGetDriverVersion(driver, sizeof(driver));
    cuda_version(cuda, sizeof(cuda));
    printf("\n==============NVSMI LOG==============\n\n");
    kv(0, "Timestamp", "%.24s", ctime(&now));
    kv(0, "Driver Version", "%s", driver);
    kv(0, "CUDA Version", "%s", cuda);
    printf("\n");
    kv(0, "Attached GPUs", "%u", count);
    for (unsigned int i = 0; i < count; i++) {
        nvmlDevice_t gpu, migs[8];
        nvmlPciInfo_t pci;
        nvmlMemory_t memory;
        nvmlBrandType_t brand = 0;
        nvmlDeviceArchitecture_t arch = 0;
        unsigned int current = 0, pending = 0, minor = 0;
        if (!gpu_handle(i, &gpu) || !selected(i, gpu))
            continue;
        nvmlDeviceGetPciInfo_v3(gpu, &pci);
        nvmlDeviceGetMemoryInfo(gpu, &memory);
        nvmlDeviceGetBrand(gpu, &brand);
        nvmlDeviceGetArchitecture(gpu, &arch);
        nvmlDeviceGetMinorNumber(gpu, &minor);
        int mig_capable = nvmlDeviceGetMigMode(gpu, &current, &pending) == NVML_SUCCESS;
        printf("GPU %s\n", pci.busId);
        nvmlDeviceGetName(gpu, text, sizeof(text));
        kv(4, "Product Name", "%s", text);
        kv(4, "Product Brand", "%s", brand_name(brand));
        kv(4, "Product Architecture", "%s", architecture_name(arch));
        kv(4, "Persistence Mode", "Enabled");
        printf("    MIG Mode\n");
        kv(8, "Current", "%s", mig_capable ? (current ? "Enabled" : "Disabled") : "N/A");
        kv(8, "Pending", "%s", mig_capable ? (pending ? "Enabled" : "Disabled") : "N/A");
        nvmlDeviceGetSerial(gpu, text, sizeof(text));
        kv(4, "Serial Number", "%s", text);
        nvmlDeviceGetUUID(gpu, text, sizeof(text));
        kv(4, "GPU UUID", "%s", text);
        kv(4, "Minor Number", "%u", minor);
        printf("    PCI\n");
        kv(8, "Bus", "0x%02X", pci.bus);
        kv(8, "Device", "0x%02X", pci.device);
        kv(8, "Domain", "0x%04X", pci.domain);
        kv(8, "Device Id", "0x%08X", pci.pciDeviceId);
        kv(8, "Bus Id", "%s", pci.busId);
        printf("    FB Memory Usage\n");
        kv(8, "Total", "%llu MiB", memory.total >> 20);
        kv(8, "Used", "%llu MiB", memory.used >> 20);
        kv(8, "Free", "%llu MiB", memory.free >> 20);
        kv(4, "Compute Mode", "%s", compute_mode_name(gpu, 0));
        unsigned int n = mig_devices(gpu, migs);
        if (n)
            printf("    MIG Devices\n");
        for (unsigned int m = 0; m < n; m++) {
            unsigned int gi = 0, ci = 0;
            nvmlDeviceGetGpuInstanceId(migs[m], &gi);
            nvmlDeviceGetComputeInstanceId(migs[m], &ci);
            nvmlDeviceGetUUID(migs[m], text, sizeof(text));
            printf("        MIG Device\n");
            kv(12, "Index", "%u", m);
            kv(12, "GPU Instance ID", "%u", gi);
            kv(12, "Compute Instance ID", "%u", ci);
            kv(12, "UUID", "%s", text);
        }
        printf("\n");
    }
    return 0;
}

/* --query-gpu=FIELD[,FIELD...] --format=csv[,noheader][,nounits] */
static int query(unsigned int count, const char *fields, const char *format)
{
    static const char *known[] = {"count", "index", "name", "uuid", "serial", "pci.bus_id", "driver_version",
                                  "memory.total", "mig.mode.current", "compute_cap", "minor_number", "compute_mode", NULL};
    if (!format || strncmp(format, "csv", 3) != 0) {
        fprintf(stderr, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n");
        return 2;
    }
    int header = strstr(format, "noheader") == NULL, units = strstr(format, "nounits") == NULL;
    char list[1024];
    snprintf(list, sizeof(list), "%s", fields);
    const char *names[32];
    int n = 0;
    for (char *save = NULL, *f = strtok_r(list, ",", &save); f && n < 32; f = strtok_r(NULL, ",", &save)) {
        while (*f == ' ')
            f++;
        int ok = 0;
        for (int k = 0; known[k]; k++)
            ok |= strcmp(known[k], f) == 0;
        if (!ok) {
            fprintf(stderr, "Field \"%s\" is not a valid field to query.\n", f);
            return 2;
        }
        names[n++] = f;
    }
    if (header)
        for (int k = 0; k < n; k++)
            printf("%s%s%s", names[k], strcmp(names[k], "memory.total") == 0 ? " [MiB]" : "", k + 1 < n ? ", " : "\n");
    for (unsigned int i = 0; i < count; i++) {
        nvmlDevice_t gpu;
        if (!gpu_handle(i, &gpu) || !selected(i, gpu))
            continue;
        for (int k = 0; k < n; k++) {
            char value[128] = "";
            nvmlPciInfo_t pci;
            nvmlMemory_t memory;
            unsigned int u = 0, pending = 0;
            int major = 0, minor = 0;
            if (!strcmp(names[k], "count")) snprintf(value, sizeof(value), "%u", count);
            else if (!strcmp(names[k], "index")) snprintf(value, sizeof(value), "%u", i);
            else if (!strcmp(names[k], "name")) nvmlDeviceGetName(gpu, value, sizeof(value));
            else if (!strcmp(names[k], "uuid")) nvmlDeviceGetUUID(gpu, value, sizeof(value));
            else if (!strcmp(names[k], "serial")) nvmlDeviceGetSerial(gpu, value, sizeof(value));
            else if (!strcmp(names[k], "pci.bus_id")) nvmlDeviceGetPciInfo_v3(gpu, &pci), snprintf(value, sizeof(value), "%s", pci.busId);
            else if (!strcmp(names[k], "driver_version")) nvmlSystemGetDriverVersion(value, sizeof(value));
            else if (!strcmp(names[k], "memory.total")) nvmlDeviceGetMemoryInfo(gpu, &memory), snprintf(value, sizeof(value), units ? "%llu MiB" : "%llu", memory.total >> 20);
            else if (!strcmp(names[k], "mig.mode.current")) snprintf(value, sizeof(value), "%s", nvmlDeviceGetMigMode(gpu, &u, &pending) != NVML_SUCCESS ? "[N/A]" : u ? "Enabled" : "Disabled");
            else if (!strcmp(names[k], "compute_cap")) nvmlDeviceGetCudaComputeCapability(gpu, &major, &minor), snprintf(value, sizeof(value), "%d.%d", major, minor);
            else if (!strcmp(names[k], "compute_mode")) snprintf(value, sizeof(value), "%s", compute_mode_name(gpu, 0));
            else if (!strcmp(names[k], "minor_number")) nvmlDeviceGetMinorNumber(gpu, &u), snprintf(value, sizeof(value), "%u", u);
            printf("%s%s", value, k + 1 < n ? ", " : "\n");
        }
    }
    return 0;
}

/* `-c MODE`: DEFAULT, PROHIBITED, EXCLUSIVE_PROCESS or their numbers 0, 2, 3 (1, EXCLUSIVE_THREAD, is gone), for each selected GPU,
 * with the real tool's lines. */
static int set_compute_mode(unsigned int count, const char *name)
{
    static const struct { const char *name, *number; nvmlComputeMode_t mode; } modes[] = {
        {"DEFAULT", "0", NVML_COMPUTEMODE_DEFAULT},
        {"PROHIBITED", "2", NVML_COMPUTEMODE_PROHIBITED},
        {"EXCLUSIVE_PROCESS", "3", NVML_COMPUTEMODE_EXCLUSIVE_PROCESS},
    };
    int k = -1;
    for (int m = 0; m < 3; m++)
        if (!strcasecmp(name, modes[m].name) || !strcmp(name, modes[m].number))
            k = m;
    if (k < 0) {
        fprintf(stderr, "Invalid compute mode \"%s\": use DEFAULT, PROHIBITED or EXCLUSIVE_PROCESS (0, 2 or 3).\n", name);
        return 2;
    }
    int rc = 0;
    for (unsigned int i = 0; i < count && rc == 0; i++) {
        nvmlDevice_t gpu;
        nvmlPciInfo_t pci;
        if (!gpu_handle(i, &gpu) || !selected(i, gpu))
            continue;
        nvmlDeviceGetPciInfo_v3(gpu, &pci);
        nvmlReturn_t ret = nvmlDeviceSetComputeMode(gpu, modes[k].mode);
        if (ret == NVML_SUCCESS) {
            printf("Set compute mode to %s for GPU %s.\n", modes[k].name, pci.busId);
            continue;
        }
        printf("Unable to set the compute mode for GPU %s: %s\n", pci.busId,
               ret == NVML_ERROR_NO_PERMISSION ? "Insufficient Permissions" : nvmlErrorString(ret));
        printf("Terminating early due to previous errors.\n");
        rc = ret == NVML_ERROR_NO_PERMISSION ? 4 : 15;
    }
    if (rc == 0)
        printf("All done.\n");
    return rc;
}

/* The number of GPUs -i picks (all visible ones without -i). */
static unsigned int selected_count(unsigned int count)
{
    unsigned int n = 0;
    for (unsigned int i = 0; i < count; i++) {
        nvmlDevice_t gpu;
        if (nvmlDeviceGetHandleByIndex_v2(i, &gpu) != NVML_SUCCESS || selected(i, gpu))
            n++;      /* a lost GPU counts: its line says why it is not shown */
    }
    return n;
}

static void usage(void)
{
    printf("NVIDIA System Management Interface (simulated host)\n\n"
           "nvidia-smi [OPTION]\n"
           "    -h,   --help                Print usage information and exit.\n"
           "    -L,   --list-gpus           Display a list of GPUs connected to the system.\n"
           "    -q,   --query               Display GPU or Unit info.\n"
           "    -i,   --id=ID               Target one GPU: its index, UUID or PCI bus id.\n"
           "    -c,   --compute-mode=MODE   Set the compute mode: DEFAULT, PROHIBITED, EXCLUSIVE_PROCESS\n"
           "                                (or 0, 2, 3). Needs root.\n"
           "          --version             Print the version and exit.\n"
           "    --query-gpu=FIELDS          Information about GPUs (count, index, name, uuid, serial,\n"
           "                                pci.bus_id, driver_version, memory.total, mig.mode.current,\n"
           "                                compute_cap, minor_number, compute_mode).\n"
           "    --format=csv[,noheader][,nounits]\n");
}

int main(int argc, char **argv)
{
    int list = 0, version = 0, query_all = 0;
    const char *fields = NULL, *format = NULL, *compute_mode = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int is_id = !strcmp(a, "-i") || !strcmp(a, "--id");
        int is_mode = !strcmp(a, "-c") || !strcmp(a, "--compute-mode");
        if ((is_id || is_mode) && i + 1 < argc) {
            *(is_id ? &only_id : &compute_mode) = argv[++i];
            continue;
        }
        if (!strncmp(a, "--id=", 5)) only_id = a + 5;
        else if (!strncmp(a, "--compute-mode=", 15)) compute_mode = a + 15;
        else if (!strcmp(a, "-L") || !strcmp(a, "--list-gpus")) list = 1;
        else if (!strcmp(a, "--version")) version = 1;
        else if (!strcmp(a, "-q") || !strcmp(a, "--query")) query_all = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        else if (!strncmp(a, "--query-gpu=", 12)) fields = a + 12;
        else if (!strncmp(a, "--format=", 9)) format = a + 9;
        else {
            fprintf(stderr, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n");
            return 2;
        }
    }
    nvmlReturn_t ret = nvmlInit_v2();
    if (ret != NVML_SUCCESS) {
        fprintf(stderr, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                        "Make sure that the latest NVIDIA driver is installed and running.\n\n");
        return 9;
    }
    if (version) {
        char driver[96], cuda[32];
        nvmlSystemGetDriverVersion(driver, sizeof(driver));
        cuda_version(cuda, sizeof(cuda));
        printf("NVIDIA-SMI version  : %s\nNVML version        : %.6s\nDRIVER version      : %s\nCUDA Version        : %s\n",
               driver, driver, driver, cuda);
        nvmlShutdown();
        return 0;
    }
    unsigned int count = 0;
    nvmlDeviceGetCount_v2(&count);
    int rc;
    if ((count == 0 && !fields) || (only_id && selected_count(count) == 0)) {
        printf("No devices were found\n");
        rc = 6;
    } else if (compute_mode) {
        rc = set_compute_mode(count, compute_mode);
    } else if (fields) {
        rc = query(count, fields, format);
    } else if (query_all) {
        rc = report(count);
    } else {
        rc = list ? list_gpus(count) : summary(count);
    }
    nvmlShutdown();
    return rc;
}
