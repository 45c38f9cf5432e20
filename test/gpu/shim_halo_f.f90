! Halo exchange from Fortran on device memory (use mpi).
!
! Each rank owns a few rows of NX doubles (3 or 4: uneven on purpose) between
! two ghost rows, in one cudaMalloc'd block that Fortran sees as an array
! through c_f_pointer.  Array elements of that array (f(1, k): sequence
! association, so only the address is taken, never the device data read on
! the host) go to MPI_Sendrecv and to MPI_Irecv/MPI_Isend/MPI_Waitall.  After
! each exchange the block is copied back and checked: each ghost row holds the
! neighbour's row next to it, the owned rows are unchanged, and the ghosts
! facing MPI_PROC_NULL still hold their sentinel.  Values encode round, rank,
! row and column, so a stale or misplaced row is caught.
!
! The CUDA runtime is called directly through bind(c) interfaces (link with
! -lcudart).  Exit status: 0 pass, 1 mismatch, 77 no usable GPU.  Device
! buffers reach MPI, so run it with libmpccl_shim.so preloaded or on a
! CUDA-aware MPI.
module shim_cuda_rt
    use iso_c_binding
    implicit none
    integer(c_int), parameter :: cuda_memcpy_h2d = 1, cuda_memcpy_d2h = 2
    interface
        integer(c_int) function cuda_get_device_count(n) bind(c, name='cudaGetDeviceCount')
            import :: c_int
            integer(c_int) :: n
        end function
        integer(c_int) function cuda_set_device(d) bind(c, name='cudaSetDevice')
            import :: c_int
            integer(c_int), value :: d
        end function
        integer(c_int) function cuda_malloc(p, n) bind(c, name='cudaMalloc')
            import :: c_int, c_ptr, c_size_t
            type(c_ptr) :: p
            integer(c_size_t), value :: n
        end function
        integer(c_int) function cuda_free(p) bind(c, name='cudaFree')
            import :: c_int, c_ptr
            type(c_ptr), value :: p
        end function
        ! the cudaMemcpyKind enum is passed as the C int it is
        integer(c_int) function cuda_memcpy(dst, src, n, kind) bind(c, name='cudaMemcpy')
            import :: c_int, c_ptr, c_size_t
            type(c_ptr), value :: dst, src
            integer(c_size_t), value :: n
            integer(c_int), value :: kind
        end function
    end interface
end module shim_cuda_rt

program shim_halo_f
    use mpi
    use iso_c_binding
    use shim_cuda_rt
    implicit none
    integer, parameter :: nx = 1031
    real(c_double), parameter :: sentinel = -1.0d0
    integer :: ierr, rank, nranks, lrank, local, up, down, nloc, k, i, round, errors, all_errors
    integer :: have, all_have
    integer(c_int) :: ndev, rc
    integer :: reqs(4)
    integer(c_size_t) :: bytes
    type(c_ptr) :: dptr
    real(c_double), pointer :: f(:, :)
    real(c_double), allocatable, target :: h(:, :)
    character(len=24) :: form

    call MPI_Init(ierr)
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
    call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
    call MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, local, ierr)
    call MPI_Comm_rank(local, lrank, ierr)
    call MPI_Comm_free(local, ierr)

    ndev = 0
    rc = cuda_get_device_count(ndev)
    have = 0
    if (rc == 0 .and. ndev > 0) have = 1
    call MPI_Allreduce(have, all_have, 1, MPI_INTEGER, MPI_MIN, MPI_COMM_WORLD, ierr)
    if (all_have == 0) then
        if (rank == 0) print '(a)', 'SKIP: no usable CUDA device on every rank'
        call MPI_Finalize(ierr)
        stop 77
    end if
    rc = cuda_set_device(mod(lrank, ndev))
    call check_cuda(rc, 'cudaSetDevice')

    nloc = rows_of(rank)
    up = MPI_PROC_NULL
    down = MPI_PROC_NULL
    if (rank > 0) up = rank - 1
    if (rank < nranks - 1) down = rank + 1
    ! columns 1..nloc+2 of f: top ghost, the owned rows, bottom ghost
    bytes = int(nx, c_size_t) * int(nloc + 2, c_size_t) * 8_c_size_t
    rc = cuda_malloc(dptr, bytes)
    call check_cuda(rc, 'cudaMalloc')
    call c_f_pointer(dptr, f, [nx, nloc + 2])
    allocate (h(nx, nloc + 2))
    if (rank == 0) print '(a,i0,a,i0,a)', '# shim_halo_f: ', nranks, ' rank(s), ', nx, &
        ' doubles per row, 3 or 4 rows per rank'

    errors = 0
    do round = 1, 4
        ! fresh values on the device, ghosts set to the sentinel
        do k = 1, nloc + 2
            do i = 1, nx
                if (k == 1 .or. k == nloc + 2) then
                    h(i, k) = sentinel
                else
                    h(i, k) = value_of(round, rank, k - 1, i)
                end if
            end do
        end do
        rc = cuda_memcpy(dptr, c_loc(h), bytes, cuda_memcpy_h2d)
        call check_cuda(rc, 'cudaMemcpy to the device')

        if (mod(round, 2) == 1) then
            form = 'MPI_Sendrecv'
            ! first owned row up (into the upper rank's bottom ghost), the
            ! lower rank's first row into ours; then the other way
            call MPI_Sendrecv(f(1, 2), nx, MPI_DOUBLE_PRECISION, up, 1, &
                              f(1, nloc + 2), nx, MPI_DOUBLE_PRECISION, down, 1, &
                              MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
            call MPI_Sendrecv(f(1, nloc + 1), nx, MPI_DOUBLE_PRECISION, down, 2, &
                              f(1, 1), nx, MPI_DOUBLE_PRECISION, up, 2, &
                              MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
        else
            form = 'MPI_Isend/Irecv/Waitall'
            call MPI_Irecv(f(1, 1), nx, MPI_DOUBLE_PRECISION, up, 2, MPI_COMM_WORLD, reqs(1), ierr)
            call MPI_Irecv(f(1, nloc + 2), nx, MPI_DOUBLE_PRECISION, down, 1, MPI_COMM_WORLD, reqs(2), ierr)
            call MPI_Isend(f(1, 2), nx, MPI_DOUBLE_PRECISION, up, 1, MPI_COMM_WORLD, reqs(3), ierr)
            call MPI_Isend(f(1, nloc + 1), nx, MPI_DOUBLE_PRECISION, down, 2, MPI_COMM_WORLD, reqs(4), ierr)
            call MPI_Waitall(4, reqs, MPI_STATUSES_IGNORE, ierr)
        end if
        if (ierr /= MPI_SUCCESS) then
            print '(a,i0,a,a,a,i0)', '[rank ', rank, '] ', trim(form), ' returned ', ierr
            errors = errors + 1
        end if

        h = -2.0d0
        rc = cuda_memcpy(c_loc(h), dptr, bytes, cuda_memcpy_d2h)
        call check_cuda(rc, 'cudaMemcpy from the device')
        do k = 1, nloc + 2
            do i = 1, nx
                call expect(h(i, k), expected(k, i), k, i)
            end do
        end do
        call MPI_Allreduce(errors, all_errors, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
        if (rank == 0) then
            if (all_errors == 0) then
                print '(a,i0,a,a,a)', 'round ', round, ' (', trim(form), '): PASS'
            else
                print '(a,i0,a,a,a,i0,a)', 'round ', round, ' (', trim(form), '): FAIL (', all_errors, &
                    ' wrong values so far)'
            end if
        end if
    end do

    rc = cuda_free(dptr)
    deallocate (h)
    call MPI_Finalize(ierr)
    if (all_errors /= 0) then
        if (rank == 0) print '(a)', '# FAILED'
        stop 1
    end if
    if (rank == 0) print '(a)', '# passed'

contains

    integer function rows_of(r)
        integer, intent(in) :: r
        rows_of = 3 + mod(r, 2)
    end function

    ! exact in double: round, rank, row and column in separate decimal fields
    real(c_double) function value_of(rnd, r, row, col)
        integer, intent(in) :: rnd, r, row, col
        value_of = real(rnd, c_double) * 1.0d9 + real(r, c_double) * 1.0d6 + real(row, c_double) * 1.0d4 &
                   + real(col, c_double)
    end function

    real(c_double) function expected(k, col)
        integer, intent(in) :: k, col
        if (k == 1) then
            ! the upper rank's last row
            expected = sentinel
            if (up /= MPI_PROC_NULL) expected = value_of(round, up, rows_of(up), col)
        else if (k == nloc + 2) then
            ! the lower rank's first row
            expected = sentinel
            if (down /= MPI_PROC_NULL) expected = value_of(round, down, 1, col)
        else
            expected = value_of(round, rank, k - 1, col)
        end if
    end function

    subroutine expect(got, want, k, col)
        real(c_double), intent(in) :: got, want
        integer, intent(in) :: k, col
        if (got /= want) then
            errors = errors + 1
            if (errors <= 5) print '(a,i0,a,i0,a,i0,a,i0,a,f0.1,a,f0.1)', '[rank ', rank, '] FAIL round ', &
                round, ': row ', k, ' column ', col, ': got ', got, ', expected ', want
        end if
    end subroutine

    subroutine check_cuda(code, what)
        integer(c_int), intent(in) :: code
        character(len=*), intent(in) :: what
        integer :: e
        if (code /= 0) then
            print '(a,i0,a,a,a,i0)', '[rank ', rank, '] ', what, ' failed: cudaError ', code
            call MPI_Abort(MPI_COMM_WORLD, 2, e)
        end if
    end subroutine

end program shim_halo_f
