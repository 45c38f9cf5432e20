! Point-to-point through the shim's mpi_f08 entry points: Sendrecv with a
! TYPE(MPI_Status), Irecv/Isend/Waitany (1-based index), persistent requests
! completed by a Testall loop.  Host buffers: with MPCCL_SHIM_HOST=1 they take
! the device-buffer protocol.  Exit code 1 on a wrong value.
program test_shim_p2p_f08
  use mpi_f08
  implicit none
  integer, parameter :: n = 3001
  integer :: rank, nranks, left, right, i, cnt, idx, nbad, total, it
  type(MPI_Status) :: st, sts(2)
  type(MPI_Request) :: req(2)
  double precision :: a(n), b(n)
  logical :: flag
  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks)
  right = mod(rank + 1, nranks); left = mod(rank + nranks - 1, nranks); nbad = 0
  do i = 1, n
    a(i) = rank * 10000 + i
  end do
  b = -1
  call MPI_Sendrecv(a, n, MPI_DOUBLE_PRECISION, right, 7, b, n, MPI_DOUBLE_PRECISION, left, 7, MPI_COMM_WORLD, st)
  call MPI_Get_count(st, MPI_DOUBLE_PRECISION, cnt)
  if (st%MPI_SOURCE /= left .or. st%MPI_TAG /= 7 .or. cnt /= n) nbad = nbad + 1
  do i = 1, n
    if (b(i) /= left * 10000 + i) nbad = nbad + 1
  end do
  b = -1
  call MPI_Irecv(b, n, MPI_DOUBLE_PRECISION, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, req(1))
  call MPI_Isend(a, n, MPI_DOUBLE_PRECISION, right, 9, MPI_COMM_WORLD, req(2))
  do it = 1, 2
    call MPI_Waitany(2, req, idx, st)
    if (idx < 1 .or. idx > 2) nbad = nbad + 1
    if (idx == 1) then
      call MPI_Get_count(st, MPI_DOUBLE_PRECISION, cnt)
      if (st%MPI_SOURCE /= left .or. st%MPI_TAG /= 9 .or. cnt /= n) nbad = nbad + 1
    end if
  end do
  do i = 1, n
    if (b(i) /= left * 10000 + i) nbad = nbad + 1
  end do
  call MPI_Recv_init(b, n, MPI_DOUBLE_PRECISION, left, 11, MPI_COMM_WORLD, req(1))
  call MPI_Send_init(a, n, MPI_DOUBLE_PRECISION, right, 11, MPI_COMM_WORLD, req(2))
  do it = 1, 2
    call MPI_Startall(2, req)
    flag = .false.
    do while (.not. flag)
      call MPI_Testall(2, req, flag, sts)
    end do
    if (sts(1)%MPI_SOURCE /= left) nbad = nbad + 1
    do i = 1, n
      if (b(i) /= left * 10000 + i) nbad = nbad + 1
    end do
  end do
  call MPI_Request_free(req(1)); call MPI_Request_free(req(2))
  call MPI_Allreduce(nbad, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
  if (rank == 0) print '(a,i0,a)', 'test_shim_p2p_f08: ', total, ' wrong values'
  call MPI_Finalize()
  if (total /= 0) stop 1
end program test_shim_p2p_f08
