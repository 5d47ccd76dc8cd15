#ifndef CBLUETOOTH_SHIM_H
#define CBLUETOOTH_SHIM_H
#include <sys/types.h>
#include <sys/socket.h>
#include <bluetooth/bluetooth.h>
#include <bluetooth/hci.h>
#include <bluetooth/hci_lib.h>
#include <bluetooth/l2cap.h>

/* BDADDR_ANY / BDADDR_LOCAL are compound-literal macros that Swift cannot import. */
static inline bdaddr_t cbt_bdaddr_any(void) { bdaddr_t a = {{0, 0, 0, 0, 0, 0}}; return a; }
#endif
