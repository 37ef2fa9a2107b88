// rc_pingpong: ibv_rc_pingpong on vfab's RDMA transport (examples/common/rdma_pingpong.hpp).
//
//   rc_pingpong -d 0000:00:02.0 --ip 10.77.0.1 -g 0                 # server
//   rc_pingpong -d 0000:00:02.0 --ip 10.77.0.1 -g 0 SERVER           # client
//   ibv_rc_pingpong -d rxe0 -g 1 SERVER                              # or rdma-core's, either side
#include "rdma_pingpong.hpp"

int main(int argc, char** argv) { return vfab::examples::pingpong_main(argc, argv, vfab::rdma::QpType::rc, 4096); }
