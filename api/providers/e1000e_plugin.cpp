// libvfab-e1000e.so: the e1000e provider as a plugin (the same code as the built-in one), so
// that plugin loading is exercised with a real driver.
#include "api/providers/e1000e.hpp"

VFAB_PROVIDER_PLUGIN(vfab::providers::kE1000eRecord)
