// The transport's objects, all of them: include this in transport/ (and white-box tests).
// port.hpp the port; qp.hpp the queue pairs and their roles; objects.hpp CQs, SRQs, address
// handles, XRC domains; raw_packet.hpp raw-packet queue pairs and flows.
#pragma once

#include "port.hpp"
