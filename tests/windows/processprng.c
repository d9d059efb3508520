/* Wine 8 (Debian 12) has no bcryptprimitives.dll, whose ProcessPrng the Rust standard library
 * calls for random seeds since Rust 1.78, so every Rust program fails to load under it. This
 * stand-in exports ProcessPrng over RtlGenRandom (advapi32's SystemFunction036), which Wine has.
 * It is put in the test prefix only (scripts/wine.sh); real Windows has its own DLL. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T length) {
    while (length > 0) {
        ULONG chunk = length > 0x10000000 ? 0x10000000 : (ULONG)length;
        if (!SystemFunction036(data, chunk)) {
            return FALSE;
        }
        data += chunk;
        length -= chunk;
    }
    return TRUE;
}
